//! Line diff (Myers' O(ND) algorithm) and unified hunks, for `diff`.

use super::model::Hunk;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Equal,
    Delete,
    Insert,
}

/// Beyond this many differences, give up on a minimal diff: everything old is removed, everything
/// new added (keeps the plugin fast on huge, unrelated values).
const MAX_D: usize = 4000;

/// The edit script turning `a` into `b`.
pub fn diff<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut out: Vec<(Op, &str)> = a[..prefix].iter().map(|l| (Op::Equal, *l)).collect();
    out.extend(myers(am, bm));
    out.extend(a[a.len() - suffix..].iter().map(|l| (Op::Equal, *l)));
    out
}

fn myers<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (n + m) as usize;
    if max == 0 {
        return Vec::new();
    }
    let offset = max as isize + 1;
    let mut v = vec![0isize; 2 * max + 3];
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let mut found = None;
    'outer: for d in 0..=max.min(MAX_D) as isize {
        trace.push(v.clone());
        let mut k = -d;
        while k <= d {
            let idx = (k + offset) as usize;
            let mut x = if k == -d || (k != d && v[idx - 1] < v[idx + 1]) { v[idx + 1] } else { v[idx - 1] + 1 };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[idx] = x;
            if x >= n && y >= m {
                found = Some(d);
                break 'outer;
            }
            k += 2;
        }
    }
    let Some(dmax) = found else {
        let mut out: Vec<(Op, &str)> = a.iter().map(|l| (Op::Delete, *l)).collect();
        out.extend(b.iter().map(|l| (Op::Insert, *l)));
        return out;
    };
    // Backtrack through the saved frontiers.
    let mut out = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (1..=dmax).rev() {
        let v = &trace[d as usize];
        let k = x - y;
        let idx = (k + offset) as usize;
        let prev_k = if k == -d || (k != d && v[idx - 1] < v[idx + 1]) { k + 1 } else { k - 1 };
        let prev_x = v[(prev_k + offset) as usize];
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            x -= 1;
            y -= 1;
            out.push((Op::Equal, a[x as usize]));
        }
        if x == prev_x {
            y -= 1;
            out.push((Op::Insert, b[y as usize]));
        } else {
            x -= 1;
            out.push((Op::Delete, a[x as usize]));
        }
    }
    while x > 0 && y > 0 {
        x -= 1;
        y -= 1;
        out.push((Op::Equal, a[x as usize]));
    }
    out.reverse();
    out
}

/// Splits a value into lines (without their `\n`).
pub fn lines(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    s.strip_suffix('\n').unwrap_or(s).split('\n').collect()
}

/// Unified hunks of the line diff between two values, with `context` lines around changes.
/// A value that differs only in its final newline gets a hunk saying so.
pub fn hunks(old: &str, new: &str, context: usize) -> Vec<Hunk> {
    let (a, b) = (lines(old), lines(new));
    let script = diff(&a, &b);
    let mut hunks = Vec::new();
    let changes: Vec<usize> = script.iter().enumerate().filter(|(_, (op, _))| *op != Op::Equal).map(|(i, _)| i).collect();
    let mut i = 0;
    while i < changes.len() {
        // Group changes whose context windows touch.
        let start = changes[i].saturating_sub(context);
        let mut end = changes[i];
        while i + 1 < changes.len() && changes[i + 1] <= end + 2 * context + 1 {
            i += 1;
            end = changes[i];
        }
        let end = (end + context + 1).min(script.len());
        let (mut old_start, mut new_start) = (1, 1);
        for (op, _) in &script[..start] {
            match op {
                Op::Equal => {
                    old_start += 1;
                    new_start += 1;
                }
                Op::Delete => old_start += 1,
                Op::Insert => new_start += 1,
            }
        }
        let mut hunk = Hunk { old_start, old_lines: 0, new_start, new_lines: 0, lines: Vec::new() };
        for (op, line) in &script[start..end] {
            let (mark, o, n) = match op {
                Op::Equal => (' ', 1, 1),
                Op::Delete => ('-', 1, 0),
                Op::Insert => ('+', 0, 1),
            };
            hunk.old_lines += o;
            hunk.new_lines += n;
            hunk.lines.push(format!("{mark}{line}"));
        }
        // Empty sides start at the line before, as in unified diffs.
        if hunk.old_lines == 0 {
            hunk.old_start -= 1;
        }
        if hunk.new_lines == 0 {
            hunk.new_start -= 1;
        }
        hunks.push(hunk);
        i += 1;
    }
    if hunks.is_empty() && old != new {
        let note = |s: &str| if s.ends_with('\n') { "ends with a newline" } else { "has no newline at the end" };
        hunks.push(Hunk {
            old_start: a.len(),
            old_lines: 0,
            new_start: b.len(),
            new_lines: 0,
            lines: vec![format!("\\ old value {}, new value {}", note(old), note(new))],
        });
    }
    hunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(a: &[&str], script: &[(Op, &str)]) -> (Vec<String>, Vec<String>) {
        let old: Vec<String> = script.iter().filter(|(op, _)| *op != Op::Insert).map(|(_, l)| l.to_string()).collect();
        let new: Vec<String> = script.iter().filter(|(op, _)| *op != Op::Delete).map(|(_, l)| l.to_string()).collect();
        assert_eq!(old, a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        (old, new)
    }

    #[test]
    fn scripts_rebuild_both_sides_minimally() {
        let cases: &[(&[&str], &[&str], usize)] = &[
            (&[], &[], 0),
            (&["a"], &[], 1),
            (&[], &["a", "b"], 2),
            (&["a", "b", "c"], &["a", "x", "c"], 2),
            (&["a", "b", "c", "a", "b", "b", "a"], &["c", "b", "a", "b", "a", "c"], 5),
            (&["x", "y"], &["y", "x"], 2),
        ];
        for (a, b, edits) in cases {
            let script = diff(a, b);
            let (_, new) = apply(a, &script);
            assert_eq!(new, b.iter().map(|s| s.to_string()).collect::<Vec<_>>(), "{a:?} → {b:?}");
            assert_eq!(script.iter().filter(|(op, _)| *op != Op::Equal).count(), *edits, "{a:?} → {b:?}: {script:?}");
        }
    }

    #[test]
    fn hunks_are_unified() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\neleven\n";
        let h = hunks(old, new, 1);
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].old_start, h[0].old_lines, h[0].new_start, h[0].new_lines), (4, 3, 4, 3));
        assert_eq!(h[0].lines, vec![" 4", "-5", "+five", " 6"]);
        assert_eq!((h[1].old_start, h[1].old_lines, h[1].new_start, h[1].new_lines), (10, 1, 10, 2));
        assert_eq!(h[1].lines, vec![" 10", "+eleven"]);
        // Adjacent windows merge.
        assert_eq!(hunks("a\nb\nc\n", "x\nb\ny\n", 1).len(), 1);
        // Added value: old side is empty.
        let added = hunks("", "k: v\n", 3);
        assert_eq!((added[0].old_start, added[0].old_lines, added[0].new_start, added[0].new_lines), (0, 0, 1, 1));
        // Only the final newline differs.
        assert!(hunks("a", "a\n", 3)[0].lines[0].starts_with("\\ "));
        assert!(hunks("a\n", "a\n", 3).is_empty());
    }
}
