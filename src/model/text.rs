//! Text for people: warnings that fit (the API server cuts longer ones), and text from the
//! cluster escaped before it may reach a terminal (docs/behaviour.md §9a.7).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Longest warning sent: the API server truncates longer ones.
pub const MAX_WARNING: usize = 120;

/// `list` joined by ", " within about `room` bytes, the rest counted as `+N`; always the first item.
pub fn fit_list(list: &[String], room: usize) -> String {
    fit_list_by(list, room, ", ")
}

/// [`fit_list`] with the items separated by `separator`.
pub fn fit_list_by(list: &[String], room: usize, separator: &str) -> String {
    let mut out = String::new();
    for (i, item) in list.iter().enumerate() {
        let more = format!(" +{}", list.len() - i);
        let sep = if i == 0 { "" } else { separator };
        if i > 0 && out.len() + sep.len() + item.len() + more.len() > room {
            return out + &more;
        }
        out.push_str(sep);
        out.push_str(item);
    }
    out
}

/// Text from the cluster (or the command line) as it may reach a terminal: control characters
/// (C0 but tab, DEL, C1) and Unicode's bidirectional and line-separating controls are shown as
/// escapes (`\x1b`, `\r`, `\u{202e}`), so no value or name can move the cursor, erase or
/// rewrite a line, recolour what follows or reorder it on screen. Every human output goes through
/// it: the plugin's renderers take their model through `plugin::render::clean`, errors through
/// `plugin::describe`; what confighistory writes for others' terminals (a change-cause) too.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hostile) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            c if !hostile(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// [`escape`], and `;` shown as `\x3b`: for tenant text inside confighistory's change-cause,
/// whose sources `; ` separates (docs/behaviour.md §7.9), so no name can add a source.
pub fn escape_in_cause(s: &str) -> String {
    escape(s).replace(';', "\\x3b")
}

/// Characters [`escape`] shows as escapes.
fn hostile(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_cut_at_an_item_and_the_rest_counted() {
        let list: Vec<String> = (0..100).map(|i| format!("key-{i:03}")).collect();
        let s = fit_list(&list, 40);
        assert!(s.len() <= 40, "{s}");
        assert!(s.starts_with("key-000, key-001") && s.ends_with(" +96"), "{s}");
        assert_eq!(fit_list(&list[..2], 40), "key-000, key-001");
    }
}
