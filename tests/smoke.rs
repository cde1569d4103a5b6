mod common;
use common::*;

#[test]
fn run_hands_out_tokens_one_two_three() {
    let server = RedisServer::start();
    for expected in 1..=3 {
        assert_eq!(token_run(&server.url(), &[], "billing"), expected);
    }
    assert_eq!(server.get(&key("billing")), None);
    assert_eq!(server.get(&fence("billing")).as_deref(), Some("3"));
}
