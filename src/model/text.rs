//! Warning text that fits: the API server cuts longer warnings (docs/behaviour.md, warnings).

/// Longest warning sent: the API server truncates longer ones.
pub const MAX_WARNING: usize = 120;

/// `list` joined by ", " within about `room` bytes, the rest counted as `+N`; always the first item.
pub fn fit_list(list: &[String], room: usize) -> String {
    let mut out = String::new();
    for (i, item) in list.iter().enumerate() {
        let more = format!(" +{}", list.len() - i);
        let sep = if i == 0 { "" } else { ", " };
        if i > 0 && out.len() + sep.len() + item.len() + more.len() > room {
            return out + &more;
        }
        out.push_str(sep);
        out.push_str(item);
    }
    out
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
