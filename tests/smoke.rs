mod common;
use common::*;

#[test]
fn run_hands_out_tokens_one_two_three() {
    let server = RedisServer::start();
    for expected in 1..=3 {
        let out = distlock(&server)
            .args([
                "run",
                "billing",
                "--",
                "sh",
                "-c",
                "echo $DISTLOCK_FENCING_TOKEN",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            expected.to_string()
        );
    }
    assert_eq!(server.get("distlock:{billing}"), None);
    assert_eq!(server.get("distlock:{billing}:fence").as_deref(), Some("3"));
}
