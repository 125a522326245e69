//! Line diff through the `similar` crate (linear-space Myers) and unified hunks, for `diff`.
//!
//! Guarded in time: past [`DEADLINE`] the diff stops looking for a minimal script and finishes
//! with a coarser (still correct) one, so a 1 MiB value never hangs the plugin (measured:
//! 20,000 lines, half changed, took 22 s and 2.5 GB with the old quadratic-memory Myers).

use std::time::{Duration, Instant};

use similar::{Algorithm, DiffOp};

use super::model::Hunk;

/// Time allowed for a minimal diff of one value.
pub const DEADLINE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Equal,
    Delete,
    Insert,
}

/// The edit script turning `a` into `b`.
pub fn diff<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    script(a, b, &ops(a, b))
}

fn ops(a: &[&str], b: &[&str]) -> Vec<DiffOp> {
    similar::capture_diff_slices_deadline(Algorithm::Myers, a, b, Some(Instant::now() + DEADLINE))
}

fn script<'a>(a: &[&'a str], b: &[&'a str], ops: &[DiffOp]) -> Vec<(Op, &'a str)> {
    let mut out = Vec::new();
    for op in ops {
        let (o, n) = (op.old_range(), op.new_range());
        match op {
            DiffOp::Equal { .. } => out.extend(a[o].iter().map(|l| (Op::Equal, *l))),
            DiffOp::Delete { .. } => out.extend(a[o].iter().map(|l| (Op::Delete, *l))),
            DiffOp::Insert { .. } => out.extend(b[n].iter().map(|l| (Op::Insert, *l))),
            DiffOp::Replace { .. } => {
                out.extend(a[o].iter().map(|l| (Op::Delete, *l)));
                out.extend(b[n].iter().map(|l| (Op::Insert, *l)));
            }
        }
    }
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

    #[test]
    fn twenty_thousand_lines_half_changed_stay_minimal_and_fast() {
        let old: String = (0..20_000).map(|i| format!("setting_{i}: value {i}\n")).collect();
        let new: String =
            (0..20_000).map(|i| if i % 2 == 0 { format!("setting_{i}: new {i}\n") } else { format!("setting_{i}: value {i}\n") }).collect();
        let t = std::time::Instant::now();
        let h = hunks(&old, &new, 3);
        let count = |m: char| h.iter().flat_map(|h| &h.lines).filter(|l| l.starts_with(m)).count();
        // The old implementation gave up here and printed 20,000 deletions and insertions.
        assert_eq!((count('-'), count('+')), (10_000, 10_000));
        assert!(t.elapsed() < DEADLINE * 5, "{:?}", t.elapsed());
    }

    /// Time and memory of `diff` on large values. Peak RSS per case:
    /// `LINEDIFF_CASE=20k /usr/bin/time -v target/release/deps/confighistory-* measure --ignored --nocapture`.
    #[test]
    #[ignore = "measurement, run by hand in release (docs/plugin.md)"]
    fn measure() {
        let case = std::env::var("LINEDIFF_CASE").unwrap_or_else(|_| "20k".into());
        let (old, new): (String, String) = match case.as_str() {
            // 20,000 lines, every other one changed.
            "20k" => (
                (0..20_000).map(|i| format!("setting_{i}: value {i}\n")).collect(),
                (0..20_000)
                    .map(|i| if i % 2 == 0 { format!("setting_{i}: changed {i}\n") } else { format!("setting_{i}: value {i}\n") })
                    .collect(),
            ),
            // 1 MiB of 64-byte lines, every line changed.
            "1mib" => {
                ((0..16_384).map(|i| format!("{:063}\n", i)).collect(), (0..16_384).map(|i| format!("{:063}\n", i + 1_000_000)).collect())
            }
            // One 1 MiB line.
            _ => ("a".repeat(1 << 20), "b".repeat(1 << 20)),
        };
        let t = std::time::Instant::now();
        let h = hunks(&old, &new, 3);
        let lines: usize = h.iter().map(|h| h.lines.len()).sum();
        println!("case {case}: {} hunks, {lines} lines, {:?}", h.len(), t.elapsed());
    }
}
