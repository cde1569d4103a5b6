//! The URLs of either store as text: their passwords masked for what
//! people and other hosts read, taken out for what CMD sees, and found
//! (as written and percent-decoded) for masking wherever they appear.

/// Replaces the password of a URL with `***`, both in the userinfo
/// (`redis://user:pass@host`) and in a `pass=`/`password=` query parameter
/// (`unix:///s?pass=…`). Works on unparsable input too, since it is used in
/// the error for an unparsable URL.
pub(super) fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some((_, colon, at)) = password_span(url) {
        out.replace_range(colon + 1..at, "***");
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k @ ("pass" | "password"), _)) => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// Where the userinfo of a URL with a password is: the offsets of its
/// start, its `:` and its `@` (see [`userinfo`]).
fn password_span(url: &str) -> Option<(usize, usize, usize)> {
    let start = url.find("://")? + 3;
    let (colon, at) = userinfo(&url[start..], url.len() - start)?;
    Some((start, start + colon, start + at))
}

/// Where the password of the userinfo at the start of `rest` (the text
/// after `://`, up to `end`) begins and ends: the `:` and the LAST `@`.
/// An unescaped `/`, `?`, `#` or `@` in a password would end the authority
/// early by the RFC, showing the rest of the password as path or host; the
/// last `@` errs the safe way, masking a path or query that holds an `@`
/// too.
fn userinfo(rest: &str, end: usize) -> Option<(usize, usize)> {
    let at = rest[..end].rfind('@')?;
    let colon = rest[..at].find(':')?;
    Some((colon, at))
}

/// Whether the URL has a password that only the last-`@` reading finds:
/// one holding an unescaped `/`, `?` or `#`. Such a URL means one thing to
/// distlock's masking and another to a URL parser, so it is refused with
/// a request to percent-encode.
pub(super) fn password_needs_escaping(url: &str) -> bool {
    password_span(url).is_some_and(|(start, _, at)| url[start..at].contains(['/', '?', '#']))
}

/// Masks the password of every URL inside `text`, wherever it starts
/// (`--db=postgres://app:secret@db/x` becomes
/// `--db=postgres://app:***@db/x`), keeping the user, for text that other
/// hosts will read. The userinfo is what comes before the last `@` ahead
/// of the next blank or `://` (see [`userinfo`]).
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        rest = tail;
        let end = rest
            .find(char::is_whitespace)
            .unwrap_or(rest.len())
            .min(rest.find("://").unwrap_or(rest.len()));
        if let Some((colon, at)) = userinfo(rest, end) {
            out.push_str(&rest[..=colon]);
            out.push_str("***");
            rest = &rest[at..];
        }
    }
    out.push_str(rest);
    out
}

/// The passwords a URL holds, as written and percent-decoded: the
/// userinfo's and a `pass=`/`password=` query parameter's. distlock masks
/// them wherever they appear in what it writes to Redis.
pub fn url_passwords(url: &str) -> Vec<String> {
    let mut found: Vec<String> = password_span(url)
        .map(|(_, colon, at)| url[colon + 1..at].to_owned())
        .into_iter()
        .collect();
    if let Some((_, query)) = url.split_once('?') {
        for kv in query.split(['&', '#']) {
            if let Some(("pass" | "password", v)) = kv.split_once('=') {
                found.push(v.to_owned());
            }
        }
    }
    let decoded: Vec<String> = found.iter().filter_map(|p| percent_decoded(p)).collect();
    found.extend(decoded);
    found.retain(|p| !p.is_empty());
    found.sort();
    found.dedup();
    found
}

/// `%XX` escapes undone, when there are any and the result is UTF-8 (user
/// names and passwords in URLs, of either backend).
pub(super) fn percent_decoded(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        let (byte, len) = match (b[i], hex) {
            (b'%', Some(byte)) => (byte, 3),
            (c, _) => (c, 1),
        };
        out.push(byte);
        i += len;
    }
    String::from_utf8(out).ok()
}

/// The URL with its password taken out altogether (the `:password` of the
/// userinfo, a `pass=`/`password=` query parameter), user, host, port and
/// database kept: what CMD may see of `DISTLOCK_REDIS_URL`.
pub fn without_password(url: &str) -> String {
    let mut out = url.to_owned();
    match password_span(url) {
        // `redis://:pw@host`: no user either, drop the userinfo.
        Some((start, colon, at)) if colon == start => out.replace_range(colon..=at, ""),
        // `redis://user:pw@host` → `redis://user@host`.
        Some((_, colon, at)) => out.replace_range(colon..at, ""),
        None => {}
    }
    if let Some(q) = out.find('?') {
        let kept: Vec<&str> = out[q + 1..]
            .split('&')
            .filter(|kv| {
                let key = kv.split_once('=').map_or(*kv, |(k, _)| k);
                key != "pass" && key != "password"
            })
            .collect();
        out = if kept.is_empty() {
            out[..q].to_owned()
        } else {
            format!("{}?{}", &out[..q], kept.join("&"))
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(
            redact("unix:///s.sock?db=1&pass=secret"),
            "unix:///s.sock?db=1&pass=***"
        );
        assert!(!redact("redis://a:b:c@d@h").contains("b:c"));
    }

    #[test]
    fn urls_anywhere_in_a_text_have_their_passwords_masked() {
        for (text, want) in [
            (
                "--db=postgres://app:s3cret@db:5432/x",
                "--db=postgres://app:***@db:5432/x",
            ),
            ("redis://:pw@h", "redis://:***@h"),
            (
                "a=mysql://u:p1@h1/x,amqp://g:p2@mq/ b",
                "a=mysql://u:***@h1/x,amqp://g:***@mq/ b",
            ),
            (
                "redis://u:p1@h1,redis://v:p2@h2",
                "redis://u:***@h1,redis://v:***@h2",
            ),
            ("x://u:p@ss:w@rd@h/", "x://u:***@h/"),
            ("https://example.com/a@b", "https://example.com/a@b"),
            ("ssh://git@example.com/r", "ssh://git@example.com/r"),
            // An `@` after a `/`, `?` or `#` may end a password holding
            // them: masked, erring the safe way.
            ("https://h:8080/p?u=a@b", "https://h:***@b"),
            ("redis://:ab/cd@h/0 x", "redis://:***@h/0 x"),
            ("redis://u:a?b#c@h", "redis://u:***@h"),
            ("no url: u:p@h", "no url: u:p@h"),
            ("://", "://"),
            ("é://ü:ö@ä", "é://ü:***@ä"),
        ] {
            assert_eq!(redact_urls_in(text), want, "{text}");
        }
    }

    #[test]
    fn passwords_with_an_unescaped_slash_query_hash_or_at_are_masked() {
        for (url, pw) in [
            ("redis://:ab/cd@host", "ab/cd"),
            ("redis://u:ab?cd@host:1/0", "ab?cd"),
            ("rediss://u:ab#cd@host", "ab#cd"),
            ("redis://:a@b/c?d#e@host/2", "a@b/c?d#e"),
            ("etcd://root:x/y@h1:2379,h2", "x/y"),
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains(pw) && shown.contains(":***@host") | shown.contains(":***@h1"),
                "{shown}"
            );
            assert!(url_passwords(url).contains(&pw.to_owned()), "{url}");
            assert!(!without_password(url).contains(pw), "{url}");
            assert!(
                !redact_urls_in(&format!("--url={url} x")).contains(pw),
                "{url}"
            );
            assert_eq!(
                password_needs_escaping(url),
                pw.contains(['/', '?', '#']),
                "{url}"
            );
        }
        assert_eq!(without_password("redis://:ab/cd@host/0"), "redis://host/0");
        assert_eq!(without_password("redis://u:ab/cd@host"), "redis://u@host");
        assert!(!password_needs_escaping("redis://u:p@h/0"));
        assert!(!password_needs_escaping("https://example.com/a@b"));
        assert!(!password_needs_escaping("unix:///s.sock?pass=a@b"));
    }

    #[test]
    fn the_passwords_of_a_url_are_found_as_written_and_decoded() {
        assert_eq!(url_passwords("redis://u:pw@h:1/0"), ["pw"]);
        assert_eq!(url_passwords("redis://:p%40ss@h"), ["p%40ss", "p@ss"]);
        assert_eq!(url_passwords("redis+sentinel://u:a@b@h1:1,h2:2/m"), ["a@b"]);
        assert_eq!(url_passwords("unix:///s.sock?db=1&pass=x&user=u"), ["x"]);
        assert_eq!(url_passwords("unix:///s.sock?password=y"), ["y"]);
        assert!(url_passwords("redis://u@h").is_empty());
        assert!(url_passwords("redis://:@h").is_empty());
        assert!(url_passwords("redis://h:6379").is_empty());
        assert_eq!(percent_decoded("%zz%4"), Some("%zz%4".into()));
        assert_eq!(percent_decoded("%ff"), None);
    }

    #[test]
    fn passwords_can_be_taken_out_of_a_url() {
        assert_eq!(
            without_password("redis://u:secret@h:1/0"),
            "redis://u@h:1/0"
        );
        assert_eq!(without_password("rediss://:secret@h"), "rediss://h");
        assert_eq!(without_password("redis://h:6379"), "redis://h:6379");
        assert_eq!(without_password("redis://u@h"), "redis://u@h");
        assert_eq!(
            without_password("unix:///s.sock?db=1&pass=secret&user=u"),
            "unix:///s.sock?db=1&user=u"
        );
        assert_eq!(
            without_password("unix:///s.sock?password=x"),
            "unix:///s.sock"
        );
    }
}
