use crate::common::*;

#[test]
fn run_hands_out_strictly_increasing_tokens() {
    let server = RedisServer::start();
    let mut last = 0;
    for _ in 1..=3 {
        let token = token_run(&server.url(), &[], "billing");
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    assert_eq!(server.get(&key("billing")), None);
    assert_eq!(server.get(&fence("billing")), Some(last.to_string()));
}
