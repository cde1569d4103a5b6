//! Properties of the value parsers and the timing rules (proptest): for
//! any input, a value or a one-line message, never a panic; and what is
//! accepted is what the contract describes.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..10_000_000).prop_map(Duration::from_micros),
        (0u64..100_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::MAX),
        Just(Duration::ZERO),
    ]
}

fn one_line(e: &str) -> bool {
    !e.is_empty() && !e.contains('\n') && !e.contains('\r')
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn names_are_exactly_the_contract_alphabet(s in prop_oneof!["[A-Za-z0-9._:/@+\\-]{0,205}", any::<String>()]) {
        let alphabet = (1..=200).contains(&s.len())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-:/@+".contains(c));
        let ok = alphabet && !s.starts_with('-');
        match parse_name(&s) {
            Ok(n) => { prop_assert!(ok); prop_assert_eq!(&n, &s); }
            Err(e) => {
                prop_assert!(!ok);
                prop_assert!(one_line(&e));
                prop_assert!(e.contains("A-Z a-z 0-9") && e.contains("not starting with -"), "{}", e);
            }
        }
        prop_assert_eq!(parse_prefix(&s).is_ok(), alphabet);
    }

    #[test]
    fn owner_ids_are_printable_ascii_without_spaces(s in prop_oneof!["[ -~]{0,205}", any::<String>()]) {
        let ok = (1..=200).contains(&s.len()) && s.chars().all(|c| c.is_ascii_graphic());
        match parse_owner(&s) {
            Ok(o) => { prop_assert!(ok); prop_assert_eq!(&o, &s); }
            Err(e) => { prop_assert!(!ok); prop_assert!(one_line(&e)); }
        }
    }

    #[test]
    fn durations_need_a_unit_and_read_as_humantime(s in prop_oneof![
        "[0-9]{1,25}",
        "[0-9]{1,22} ?(ns|us|ms|s|m|h|d|days|w|y|min|sec|parsecs)",
        "[0-9a-z .+\\-]{0,20}",
        any::<String>(),
    ]) {
        let t = s.trim();
        match parse_duration(&s) {
            Ok(d) => {
                prop_assert!(!t.chars().all(|c| c.is_ascii_digit()), "bare number accepted");
                prop_assert_eq!(Ok(d), humantime::parse_duration(t));
            }
            Err(e) => prop_assert!(one_line(&e), "{}", e),
        }
        match parse_expiry(&s) {
            Ok(d) => prop_assert!(d <= MAX_EXPIRY),
            Err(e) => prop_assert!(one_line(&e)),
        }
        match parse_wait(&s) {
            Ok(Wait::Forever) => prop_assert!(["forever", "inf", "infinity"].contains(&t)),
            Ok(Wait::For(d)) => prop_assert!(t == "0" || parse_duration(&s) == Ok(d)),
            Err(e) => prop_assert!(one_line(&e)),
        }
    }

    #[test]
    fn exit_codes_are_0_to_255(s in prop_oneof!["[ 0-9+\\-]{0,5}", (0u32..1000).prop_map(|n| n.to_string()), any::<String>()]) {
        match parse_exit_code(&s) {
            Ok(c) => prop_assert_eq!(Ok(c), s.trim().parse::<u8>()),
            Err(e) => { prop_assert!(s.trim().parse::<u8>().is_err()); prop_assert!(one_line(&e)); }
        }
    }

    #[test]
    fn signals_by_any_spelling_agree(n in -5i32..80, lower in any::<bool>(), sig in any::<bool>(), junk in any::<String>()) {
        // By number, and by the name it reports, in any case, with or
        // without SIG: the same signal, or the same refusal.
        let by_number = parse_signal(&n.to_string());
        if let Ok(s) = by_number {
            prop_assert_eq!(s.number, n);
            let mut name = if sig { format!("SIG{}", s.name) } else { s.name.to_owned() };
            if lower { name = name.to_ascii_lowercase(); }
            prop_assert_eq!(parse_signal(&name), Ok(s));
            // The at-risk warning takes any signal CMD can catch.
            let catchable = n != libc::SIGKILL && n != libc::SIGSTOP;
            prop_assert_eq!(parse_any_signal(&name).map(|a| a.number).ok(), catchable.then_some(n));
        } else if let Err(e) = by_number {
            prop_assert!(one_line(&e));
        }
        for r in [parse_signal(&junk).err(), parse_any_signal(&junk).err()].into_iter().flatten() {
            prop_assert!(one_line(&r));
        }
    }

    /// Timings::new never panics, and whatever it accepts keeps the
    /// contract's relations, with soft/hard deadlines that add up.
    #[test]
    fn timings_accept_only_what_the_contract_allows(
        ttl in any_duration(),
        renew in prop::option::of(any_duration()),
        grace in prop::option::of(any_duration()),
    ) {
        match Timings::new(ttl, renew, grace) {
            Ok(t) => {
                prop_assert!(t.ttl.as_millis() >= 1);
                prop_assert!(!t.renew_every.is_zero());
                prop_assert!(t.renew_every <= t.ttl / 2);
                prop_assert!(t.renew_every + t.kill_grace + t.margin < t.ttl);
                prop_assert_eq!(t.margin, t.ttl / 100 + Duration::from_millis(5));
                prop_assert_eq!(t.soft_after() + t.kill_grace + t.margin, t.ttl);
                prop_assert_eq!(t.hard_after() + t.margin, t.ttl);
                prop_assert_eq!(t.ttl_ms() as u128, t.ttl.as_millis());
            }
            Err(e) => prop_assert!(one_line(&e.0), "{}", e.0),
        }
    }

    #[test]
    fn durations_are_shown_without_panicking(d in any_duration()) {
        let s = fmt_duration(d);
        prop_assert!(one_line(&s));
        // Shown rounded down, never up, and never as another value.
        let back = humantime::parse_duration(&s).unwrap();
        prop_assert!(back <= d);
        prop_assert!(d - back < Duration::from_millis(100));
    }
}
