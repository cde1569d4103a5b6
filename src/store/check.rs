//! `doctor`'s findings: each backend judges its own server (Redis by its
//! INFO and clocks, etcd by its members) in lines of these two types, and
//! `doctor` only prints them.

/// How worrying one finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Ok,
    Warn,
    Danger,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Danger => "danger",
        }
    }

    /// This verdict if `bad`, else ok.
    pub fn when(self, bad: bool) -> Verdict {
        if bad {
            self
        } else {
            Verdict::Ok
        }
    }
}

/// One `doctor` line.
#[derive(Debug)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// What to do about it; empty when the verdict is ok.
    pub advice: &'static str,
}

impl Check {
    /// A check whose advice is shown only when it is not ok.
    pub fn new(
        name: &'static str,
        verdict: Verdict,
        detail: impl Into<String>,
        advice: &'static str,
    ) -> Check {
        let advice = if verdict == Verdict::Ok { "" } else { advice };
        Check {
            name,
            verdict,
            detail: detail.into(),
            advice,
        }
    }
}
