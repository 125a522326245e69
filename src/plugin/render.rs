//! Human output: pure functions from [`super::model`] data (and the current time) to text.

use std::borrow::Cow;

use k8s_openapi::jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::build::timestamp;
use super::model::*;

pub use crate::model::text::escape;

/// `model` with every string in it, keys included, [`escape`]d: what the human renderers draw
/// from, so no field can be printed raw, whichever renderer or cell shows it. JSON and YAML
/// output print the model itself (their own escaping applies).
pub fn clean<T: Serialize + DeserializeOwned>(model: &T) -> T {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                if let Cow::Owned(e) = escape(s) {
                    *s = e;
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            serde_json::Value::Object(m) => {
                let entries = std::mem::take(m);
                for (k, mut v) in entries {
                    walk(&mut v);
                    m.insert(escape(&k).into_owned(), v);
                }
            }
            _ => {}
        }
    }
    let mut v = serde_json::to_value(model).expect("a model is plain data");
    walk(&mut v);
    serde_json::from_value(v).expect("escaping changes strings only, never the shape")
}

/// ANSI styling, or none (piped output, `NO_COLOR`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

impl Style {
    pub const PLAIN: Style = Style { color: false };
    pub const COLOR: Style = Style { color: true };

    fn paint(self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    pub fn red(self, s: &str) -> String {
        self.paint("31", s)
    }
    pub fn green(self, s: &str) -> String {
        self.paint("32", s)
    }
    pub fn yellow(self, s: &str) -> String {
        self.paint("33", s)
    }
    pub fn cyan(self, s: &str) -> String {
        self.paint("36", s)
    }
    pub fn bold(self, s: &str) -> String {
        self.paint("1", s)
    }
    pub fn dim(self, s: &str) -> String {
        self.paint("2", s)
    }
}

/// Age like kubectl prints it (`45s`, `5m30s`, `3h`, `2d4h`, `40d`).
pub fn age(created: Option<&str>, now: Timestamp) -> String {
    let Some(t) = timestamp(created) else { return "<unknown>".into() };
    let secs = now.duration_since(t).as_secs().max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if m < 10 => format!("{m}m{}s", secs % 60).replace("m0s", "m"),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60).replace("h0m", "h"),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 => format!("{d}d{}h", h % 24).replace("d0h", "d"),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

/// Time until `at` (`in 5s`), or `due` once passed.
fn until(at: &str, now: Timestamp) -> String {
    match timestamp(Some(at)) {
        Some(t) if t > now => format!("in {}", age(Some(&now.to_string()), t)),
        Some(_) => "due now".into(),
        None => "at an unknown time".into(),
    }
}

pub fn size(bytes: usize) -> String {
    match bytes {
        b if b < 1024 => format!("{b}B"),
        b if b < 1024 * 1024 => format!("{:.1}KiB", b as f64 / 1024.0),
        b => format!("{:.1}MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

/// Left-aligned columns, two spaces apart; `paint` styles a cell after padding.
fn table(header: &[&str], rows: &[Vec<String>], style: Style, paint: impl Fn(usize, usize, &str) -> String) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let last = cells.len() - 1;
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            s.push_str(c);
            if i < last {
                let pad = widths[i] - strip_ansi(c).chars().count() + 2;
                s.push_str(&" ".repeat(pad));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| style.bold(h)).collect());
    for (r, row) in rows.iter().enumerate() {
        out.push_str(&line(row.iter().enumerate().map(|(i, c)| paint(r, i, c)).collect()));
    }
    out
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn list(prefix: &str, keys: &[String]) -> Vec<String> {
    keys.iter().map(|k| format!("{prefix}{k}")).collect()
}

/// `+a -b ~c`, at most `max` items.
fn changes(added: &[String], removed: &[String], changed: &[String], max: usize) -> String {
    let mut all = list("+", added);
    all.extend(list("-", removed));
    all.extend(list("~", changed));
    if all.len() > max {
        let more = all.len() - max;
        all.truncate(max);
        all.push(format!("(+{more} more)"));
    }
    all.join(" ")
}

fn revisions(r: &[i64]) -> String {
    r.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

fn usage(u: &Usage) -> String {
    let mut parts = Vec::new();
    if !u.revisions.is_empty() {
        parts.push(format!("rev {}", revisions(&u.revisions)));
    }
    if u.current {
        parts.push("current".into());
    }
    if u.adopted {
        parts.push("adopted".into());
    }
    format!("{} ({})", u.workload, parts.join(", "))
}

pub fn history(h: &History, now: Timestamp, style: Style) -> String {
    let h = &clean(h);
    let mut out = String::new();
    let head = match (&h.head, h.source_exists) {
        (_, false) => "source deleted".to_owned(),
        (Some(hash), true) => match h.snapshots.iter().find(|s| s.head) {
            Some(s) => format!("head {hash} (revision {})", s.revision),
            None => format!("head {hash} (no snapshot yet)"),
        },
        (None, true) => "no head".into(),
    };
    let newest = h.keep.map_or_else(|| "how many newest are kept unknown".to_owned(), |k| format!("newest {k} kept"));
    out.push_str(&format!(
        "{} in namespace {}: {} snapshot{}, {head}, {newest}\n",
        style.bold(&h.source),
        h.namespace,
        h.snapshots.len(),
        if h.snapshots.len() == 1 { "" } else { "s" },
    ));
    if let Some(why) = &h.server_config_unavailable {
        out.push_str(&format!("{}\n", style.yellow(&format!("note: {why}"))));
    }
    out.push('\n');
    let keep = h.keep.map_or_else(|| "?".to_owned(), |k| k.to_string());
    let rows: Vec<Vec<String>> = h
        .snapshots
        .iter()
        .map(|s| {
            let keys = if s.revision == 1 {
                format!("{} key{}", s.keys.len(), if s.keys.len() == 1 { "" } else { "s" })
            } else {
                changes(&s.added, &s.removed, &s.changed, 6)
            };
            let used = if s.used_by.is_empty() { "-".to_owned() } else { s.used_by.iter().map(usage).collect::<Vec<_>>().join("; ") };
            let kept = if s.kept_only_by_newest {
                format!("newest {keep} only")
            } else if s.kept_by.is_empty() {
                "nothing (expires)".into()
            } else {
                s.kept_by.iter().map(|k| if k == "newest" { format!("newest {keep}") } else { k.clone() }).collect::<Vec<_>>().join(", ")
            };
            vec![s.revision.to_string(), s.hash.clone(), age(s.created.as_deref(), now), size(s.size), keys, used, kept]
        })
        .collect();
    let heads: Vec<bool> = h.snapshots.iter().map(|s| s.head).collect();
    out.push_str(&table(&["REV", "HASH", "AGE", "SIZE", "KEYS", "USED BY", "KEPT BY"], &rows, style, |r, c, cell| match c {
        0 | 1 if heads[r] => style.green(cell),
        4 => cell
            .split(' ')
            .map(|w| match w.chars().next() {
                Some('+') => style.green(w),
                Some('-') => style.red(w),
                Some('~') => style.yellow(w),
                _ => w.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => cell.to_owned(),
    }));
    out
}

fn side(s: &DiffSide, now: Timestamp) -> String {
    let mut parts = vec![match s.revision {
        Some(r) => format!("revision {r}"),
        None => "live content".into(),
    }];
    parts.push(s.name.clone());
    if s.created.is_some() {
        parts.push(format!("{} ago", age(s.created.as_deref(), now)));
    }
    if s.head {
        parts.push("head".into());
    }
    parts.join(", ")
}

pub fn diff(d: &Diff, now: Timestamp, style: Style) -> String {
    let d = &clean(d);
    let mut out = String::new();
    out.push_str(&style.bold(&format!("{} in namespace {}\n", d.source, d.namespace)));
    out.push_str(&style.red(&format!("--- {}", side(&d.from, now))));
    out.push('\n');
    out.push_str(&style.green(&format!("+++ {}", side(&d.to, now))));
    out.push('\n');
    out.push_str(&diff_body(d, style));
    out
}

/// A diff after its `---`/`+++` lines: the type and key changes, and each key's hunks.
fn diff_body(d: &Diff, style: Style) -> String {
    let mut out = String::new();
    if let Some(t) = &d.type_changed {
        out.push_str(&format!("type changed: {} → {}\n", t.from, t.to));
    }
    if d.keys.is_empty() {
        if d.type_changed.is_none() {
            out.push_str("no differences\n");
        }
        return out;
    }
    if d.keys.iter().any(|k| k.hidden) {
        out.push_str(&style.dim("values hidden: a Secret's keys and sizes only (--show-values prints its values)"));
        out.push('\n');
    }
    let summary = [("removed", &d.removed), ("added", &d.added), ("changed", &d.changed), ("unchanged", &d.unchanged)];
    for (what, keys) in summary {
        if !keys.is_empty() {
            out.push_str(&format!("{what}: {}\n", keys.join(", ")));
        }
    }
    let secret = d.source_kind == "Secret";
    for k in &d.keys {
        out.push('\n');
        // A Secret's key with the sizes of its values: all that is shown of them by default.
        let sizes = match (secret, k.old_size, k.new_size) {
            (false, ..) => String::new(),
            (true, Some(o), Some(n)) => format!(", {} → {}", size(o), size(n)),
            (true, Some(n), None) | (true, None, Some(n)) => format!(", {}", size(n)),
            (true, None, None) => String::new(),
        };
        out.push_str(&style.bold(&format!("{} ({}{sizes})", k.key, k.change)));
        out.push('\n');
        if k.hidden {
            if k.change == "changed" {
                out.push_str("value differs (hidden)\n");
            }
            continue;
        }
        if k.binary {
            out.push_str("binary value differs\n");
            continue;
        }
        for h in &k.hunks {
            out.push_str(&style.cyan(&format!("@@ -{},{} +{},{} @@", h.old_start, h.old_lines, h.new_start, h.new_lines)));
            out.push('\n');
            for l in &h.lines {
                let painted = match l.chars().next() {
                    Some('+') => style.green(l),
                    Some('-') => style.red(l),
                    Some('\\') => style.dim(l),
                    _ => l.clone(),
                };
                out.push_str(&painted);
                out.push('\n');
            }
        }
    }
    out
}

fn images_line(images: &[Image]) -> String {
    images.iter().map(|i| format!("{}={}", i.container, i.image)).collect::<Vec<_>>().join(", ")
}

fn config_use(c: &ConfigUse) -> String {
    match (c.via.as_str(), &c.snapshot) {
        ("pin", Some(s)) if c.exists => s.clone(),
        ("pin", Some(s)) => format!("{s} (deleted)"),
        ("adoption", Some(s)) => format!("{} (content of {s}, adopted)", c.reference),
        _ => format!("{} (plain reference, content unknown: the head will be used)", c.reference),
    }
}

pub fn status(s: &Status, now: Timestamp, style: Style) -> String {
    let s = &clean(s);
    let mut out = String::new();
    out.push_str(&format!("{} in namespace {}\n", style.bold(&s.workload.to_string()), s.namespace));
    let mode_from = match (s.mode_source.as_str(), &s.refused_label) {
        ("refused-label", Some(l)) => format!("the server's default: the namespace label asks for {l}, which the admin does not allow"),
        ("refused-label", None) | ("default", _) => "the server's default".into(),
        ("label", _) => "namespace label".into(),
        ("excluded", _) => "confighistory never acts in this namespace".into(),
        ("label-unchecked", _) => "namespace label, not checked against the modes the admin allows".into(),
        (other, _) => other.to_owned(),
    };
    out.push_str(&format!("  mode:      {} ({mode_from})\n", s.mode));
    for why in [&s.server_config_unavailable, &s.secrets_unreadable].into_iter().flatten() {
        out.push_str(&format!("  {}\n", style.yellow(&format!("note: {why}"))));
    }
    if let Some(r) = s.revision {
        out.push_str(&format!("  revision:  {r}\n"));
    }
    out.push_str(&format!("  images:    {}\n", images_line(&s.images)));
    if s.pins.is_empty() {
        out.push_str("  config:    no ConfigMap or Secret references\n");
    } else {
        out.push_str("  config:\n");
        let rows: Vec<Vec<String>> = s
            .pins
            .iter()
            .map(|p| {
                let mut state = Vec::new();
                let kind = super::build::source_id(&p.source).kind;
                let unreadable = kind.def().confidential && s.secrets_unreadable.is_some();
                match (&p.hash, p.exists) {
                    _ if unreadable => state.push("unknown: you may not read Secrets here (see the note)".to_owned()),
                    (None, true) => state.push("not pinned (plain reference)".to_owned()),
                    (None, false) => state.push(format!("not pinned; {} does not exist", kind.as_str())),
                    (Some(_), false) => state.push("snapshot deleted".to_owned()),
                    (Some(_), true) if p.is_head => state.push("head".to_owned()),
                    (Some(_), true) => state.push(match &p.head {
                        Some(h) => format!("not the head ({h})"),
                        None => "source deleted".into(),
                    }),
                }
                if p.held {
                    state.push("held".into());
                }
                if p.manual {
                    state.push("rollout: manual".into());
                }
                if let Some(pe) = &p.pending {
                    state.push(match (&pe.fires_at, pe.settle_seconds) {
                        (Some(at), Some(secs)) => format!(
                            "propagation to {} {} (changed {} ago, settle {secs}s)",
                            pe.head,
                            until(at, now),
                            age(Some(&pe.changed_at), now),
                        ),
                        _ => format!(
                            "propagation to {} after the settle window (changed {} ago; the server's settle window is unknown)",
                            pe.head,
                            age(Some(&pe.changed_at), now),
                        ),
                    });
                }
                vec![format!("    {}", p.source), p.reference.clone(), state.join("; ")]
            })
            .collect();
        let t = table(&["    SOURCE", "REFERENCE", "STATE"], &rows, style, |r, c, cell| match c {
            2 if s.pins[r].is_head => style.green(cell),
            2 if s.pins[r].held || s.pins[r].pending.is_some() => style.yellow(cell),
            2 if s.pins[r].hash.is_some() && !s.pins[r].exists => style.red(cell),
            _ => cell.to_owned(),
        });
        out.push_str(&t);
    }
    match (&s.undo, &s.undo_unavailable) {
        (Some(u), _) => {
            out.push_str(&format!("undo would restore revision {}:\n", u.revision.unwrap_or_default()));
            out.push_str(&format!("  images:    {}\n", images_line(&u.images)));
            for c in &u.config {
                out.push_str(&format!("  {}: {}\n", c.source, config_use(c)));
            }
        }
        (None, Some(why)) => out.push_str(&format!("undo: {why}\n")),
        (None, None) => {}
    }
    out
}

pub fn undo(u: &Undo, style: Style) -> String {
    let u = &clean(u);
    let mut out = String::new();
    let rev = u.target.revision.map(|r| format!(" to revision {r}")).unwrap_or_default();
    let dry = if u.dry_run { " (server dry run)" } else { "" };
    out.push_str(&format!("{} rolled back{rev}{dry}\n", style.bold(&u.workload.to_string())));
    let mut containers: Vec<&str> = u.before.images.iter().map(|i| i.container.as_str()).collect();
    for i in &u.after.images {
        if !containers.contains(&i.container.as_str()) {
            containers.push(&i.container);
        }
    }
    let find_image =
        |set: &[Image], c: &str| set.iter().find(|i| i.container == c).map(|i| i.image.clone()).unwrap_or_else(|| "(none)".into());
    for c in containers {
        let (b, a) = (find_image(&u.before.images, c), find_image(&u.after.images, c));
        let arrow = if a == b { style.dim("(unchanged)") } else { format!("→ {}", style.green(&a)) };
        out.push_str(&format!("  image {c}: {b} {arrow}\n"));
    }
    let mut sources: Vec<&str> = u.before.config.iter().map(|c| c.source.as_str()).collect();
    for c in &u.after.config {
        if !sources.contains(&c.source.as_str()) {
            sources.push(&c.source);
        }
    }
    let find_config = |set: &[ConfigUse], s: &str| set.iter().find(|c| c.source == s).map(config_use).unwrap_or_else(|| "(none)".into());
    for s in sources {
        let (b, a) = (find_config(&u.before.config, s), find_config(&u.after.config, s));
        let held = if u.held.iter().any(|h| h == s) { " (held: propagation skips it until the next release)" } else { "" };
        let arrow = if a == b { style.dim("(unchanged)") } else { format!("→ {}", style.green(&a)) };
        out.push_str(&format!("  config {s}: {b} {arrow}{held}\n"));
    }
    // What it brings back (docs/plugin.md, "Undo preview").
    match (&u.preview, &u.preview_unavailable) {
        (Some(p), _) if p.differs() => {
            out.push_str(if u.dry_run {
                "\nwhat the undo would bring back, against what runs now:\n"
            } else {
                "\nwhat the undo brought back, against what ran before it:\n"
            });
            // Ages are the history's business: the undo's output stays a function of its model.
            let mut p = p.clone();
            for d in p.sources.iter_mut().filter_map(|s| s.diff.as_mut()) {
                (d.from.created, d.to.created) = (None, None);
            }
            out.push_str(&revision_diff_body(&p, Timestamp::UNIX_EPOCH, style));
        }
        (Some(_), _) => out.push_str("nothing differs from what runs now\n"),
        (None, Some(why)) => out.push_str(&format!("{}\n", style.yellow(&format!("no content preview: {why}")))),
        (None, None) => {}
    }
    out
}

/// A revision's images: the image alone for one container, `container=image` for several;
/// those changed since the previous revision marked `(changed)`.
fn timeline_images(images: &[ImageEntry]) -> String {
    let one = images.len() == 1;
    images
        .iter()
        .map(|i| {
            let name = if one { i.image.clone() } else { format!("{}={}", i.container, i.image) };
            if i.changed {
                format!("{name} (changed)")
            } else {
                name
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `cfg → cfg-abc (+new -old ~changed)` per source; `(unchanged)`, `(N keys)` for a first use.
fn timeline_config(r: &TimelineRevision, first: bool) -> String {
    let mut parts: Vec<String> = r
        .config
        .iter()
        .map(|c| {
            let target = match (c.via.as_str(), &c.snapshot) {
                ("pin", Some(s)) if c.exists => s.clone(),
                ("pin", Some(s)) => format!("{s} (deleted)"),
                ("adoption", Some(s)) => format!("{s} (adopted)"),
                _ => format!("{} (plain reference)", c.reference),
            };
            let what = match () {
                _ if !c.changed => "unchanged".to_owned(),
                _ if !c.content_known => "changed, content unknown".to_owned(),
                _ if first || (c.removed.is_empty() && c.changed_keys.is_empty() && c.added == c.keys) => {
                    format!("{} key{}", c.keys.len(), if c.keys.len() == 1 { "" } else { "s" })
                }
                _ => changes(&c.added, &c.removed, &c.changed_keys, 6),
            };
            format!("{} → {target} ({what})", c.source)
        })
        .collect();
    parts.extend(r.removed_sources.iter().map(|s| format!("{s} (no longer referenced)")));
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join("; ")
    }
}

fn timeline_author(r: &TimelineRevision) -> String {
    if r.config.is_empty() && r.removed_sources.is_empty() {
        return "-".into();
    }
    if r.config_unchanged {
        return "(config unchanged)".into();
    }
    let mut parts = r.authors.clone();
    if let Some(why) = &r.author_unknown {
        parts.push(if r.authors.is_empty() { why.clone() } else { format!("and {why}") });
    }
    if parts.is_empty() {
        "unknown".into()
    } else {
        parts.join(", ")
    }
}

fn timeline_state(r: &TimelineRevision) -> String {
    match (r.running, r.held) {
        (true, true) => format!("{} (running, held)", r.revision),
        (true, false) => format!("{} (running)", r.revision),
        _ => r.revision.to_string(),
    }
}

/// `history WORKLOAD`: one row per revision, oldest first (docs/plugin.md, "Timeline").
pub fn timeline(t: &Timeline, now: Timestamp, style: Style) -> String {
    let t = &clean(t);
    let mut out = String::new();
    let n = t.revisions.len();
    let running = t.current.map_or_else(|| "no revision runs yet".to_owned(), |r| format!("revision {r} runs"));
    out.push_str(&format!(
        "{} in namespace {}: {n} revision{}, {running}\n",
        style.bold(&t.workload.to_string()),
        t.namespace,
        if n == 1 { "" } else { "s" }
    ));
    if !t.held.is_empty() {
        out.push_str(&format!(
            "{}\n",
            style.yellow(&format!("held by an undo: {} (propagation skips it until the next release)", t.held.join(", ")))
        ));
    }
    if let Some(why) = &t.secrets_unreadable {
        out.push_str(&format!("{}\n", style.yellow(&format!("note: {why}"))));
    }
    if t.revisions.is_empty() {
        out.push_str("no rollout revisions yet\n");
        return out;
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = t
        .revisions
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                timeline_state(r),
                age(r.created.as_deref(), now),
                timeline_images(&r.images),
                timeline_config(r, i == 0),
                timeline_author(r),
                r.cause.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let revs = &t.revisions;
    out.push_str(&table(&["REVISION", "AGE", "IMAGES", "CONFIG", "AUTHOR", "CAUSE"], &rows, style, |r, c, cell| match c {
        0 if revs[r].held => style.yellow(cell),
        0 if revs[r].running => style.green(cell),
        2 if revs[r].images.iter().any(|i| i.changed) => style.yellow(cell),
        3 if revs[r].config.iter().any(|c| c.changed) && r > 0 => style.yellow(cell),
        _ => cell.to_owned(),
    }));
    out
}

fn author_line(a: &Author) -> String {
    let mut s = match (&a.by, &a.unknown) {
        (Some(by), _) => by.clone(),
        (None, Some(why)) => format!("unknown ({why})"),
        (None, None) => "unknown".into(),
    };
    if let Some(w) = &a.with {
        s.push_str(&format!(" with {w}"));
    }
    if let Some(at) = &a.at {
        s.push_str(&format!(" at {at}"));
    }
    if a.from.as_deref() == Some("change-cause") {
        s.push_str(" (from confighistory's change-cause)");
    }
    s
}

/// `history WORKLOAD --revision N`: one revision in full.
pub fn timeline_revision(v: &TimelineRevisionView, now: Timestamp, style: Style) -> String {
    let v = &clean(v);
    let r = &v.revision;
    let mut out = String::new();
    let state = match (r.running, r.held) {
        (true, true) => " (running, held)",
        (true, false) => " (running)",
        _ => "",
    };
    out.push_str(&format!("{} revision {}{state} in namespace {}\n", style.bold(&v.workload.to_string()), r.revision, v.namespace));
    let created = match &r.created {
        Some(c) => format!("{c} ({} ago)", age(Some(c), now)),
        None => "unknown".into(),
    };
    out.push_str(&format!("  created:  {created}\n"));
    let cause = match (&r.cause, r.cause_by_confighistory) {
        (Some(c), true) => format!("{c} (written by confighistory)"),
        (Some(c), false) => c.clone(),
        (None, _) => "-".into(),
    };
    out.push_str(&format!("  cause:    {cause}\n"));
    out.push_str(&format!("  author:   {}\n", timeline_author(r)));
    out.push_str("  images:\n");
    for i in &r.images {
        let was = match &i.previous {
            Some(p) => format!(" (was {p})"),
            None if i.changed => " (new container)".into(),
            None => String::new(),
        };
        out.push_str(&format!("    {}: {}{was}\n", i.container, i.image));
    }
    if r.config.is_empty() {
        out.push_str("  config:   no ConfigMap or Secret references\n");
    } else {
        out.push_str("  config:\n");
    }
    for c in &r.config {
        let mut state = vec![c.source_kind.to_lowercase()];
        match (c.via.as_str(), c.exists) {
            ("pin", true) => state.push("snapshot".into()),
            ("pin", false) => state.push("snapshot deleted".into()),
            ("adoption", _) => state.push("plain reference; content from its adoption record".into()),
            _ => state.push("plain reference; content not recorded".into()),
        }
        if c.head {
            state.push("head".into());
        }
        if c.held {
            state.push("held".into());
        }
        out.push_str(&format!(
            "    {} → {} ({})\n",
            style.bold(&c.source),
            c.snapshot.as_deref().unwrap_or(&c.reference),
            state.join(", ")
        ));
        if c.content_known {
            out.push_str(&format!("      keys:    {}\n", if c.keys.is_empty() { "(none)".to_owned() } else { c.keys.join(", ") }));
        } else {
            out.push_str("      keys:    unknown (content not readable)\n");
        }
        let change = match () {
            _ if !c.changed => "unchanged since the previous revision".to_owned(),
            _ if !c.content_known => "changed (content unknown)".to_owned(),
            _ => changes(&c.added, &c.removed, &c.changed_keys, usize::MAX),
        };
        out.push_str(&format!("      changes: {change}\n"));
        out.push_str(&format!("      written: {}\n", author_line(&c.author)));
    }
    for s in &r.removed_sources {
        out.push_str(&format!("    {s}: no longer referenced\n"));
    }
    out
}

fn rev_label(r: Option<i64>) -> String {
    r.map_or_else(|| "after the undo".to_owned(), |r| format!("revision {r}"))
}

/// The body of a [`RevisionDiff`]: images, then each source (its content diff through [`diff`]).
fn revision_diff_body(d: &RevisionDiff, now: Timestamp, style: Style) -> String {
    let mut out = String::new();
    for i in &d.images {
        let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "(none)".into());
        if i.changed {
            out.push_str(&format!("  image {}: {} → {}\n", i.container, style.red(&show(&i.from)), style.green(&show(&i.to))));
        } else {
            out.push_str(&format!("  image {}: {} {}\n", i.container, show(&i.from), style.dim("(unchanged)")));
        }
    }
    if d.sources.is_empty() {
        out.push_str("  config: no ConfigMap or Secret references\n");
    }
    for s in &d.sources {
        let show = |x: &Option<String>| x.clone().unwrap_or_else(|| "(not referenced)".into());
        let arrow = if s.from == s.to { show(&s.to) } else { format!("{} → {}", show(&s.from), show(&s.to)) };
        match (&s.unknown, &s.diff) {
            (Some(why), _) => out.push_str(&format!("  config {}: {arrow}: {}\n", s.source, style.yellow(why))),
            (None, Some(diff)) if !s.changed || (diff.keys.is_empty() && diff.type_changed.is_none()) => {
                out.push_str(&format!("  config {}: {arrow} {}\n", s.source, style.dim("(same content)")))
            }
            (None, Some(diff)) => {
                out.push_str(&format!("  config {}: {arrow}\n", s.source));
                let side = |name: &Option<String>, rev: Option<i64>, ds: &DiffSide| {
                    let mut t = format!("{}: {}", rev_label(rev), name.clone().unwrap_or_else(|| "(not referenced)".into()));
                    if name.is_some() && ds.created.is_some() {
                        t.push_str(&format!(", taken {} ago", age(ds.created.as_deref(), now)));
                    }
                    if name.is_some() && ds.head {
                        t.push_str(", head");
                    }
                    t
                };
                out.push_str(&style.red(&format!("--- {}", side(&s.from, d.from, &diff.from))));
                out.push('\n');
                out.push_str(&style.green(&format!("+++ {}", side(&s.to, d.to, &diff.to))));
                out.push('\n');
                out.push_str(&diff_body(diff, style));
                out.push('\n');
            }
            (None, None) => out.push_str(&format!("  config {}: {arrow}\n", s.source)),
        }
    }
    // One blank line between a source's hunks and the next source, none after the last.
    if out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// `diff WORKLOAD --from-revision A --to-revision B` (docs/plugin.md, "Revision diff").
pub fn revision_diff(d: &RevisionDiff, now: Timestamp, style: Style) -> String {
    let d = &clean(d);
    let mut out =
        format!("{} in namespace {}: {} → {}\n", style.bold(&d.workload.to_string()), d.namespace, rev_label(d.from), rev_label(d.to));
    out.push_str(&revision_diff_body(d, now, style));
    if !d.differs() {
        out.push_str("no differences\n");
    }
    out
}

/// `list`: one row per versioned source, kubectl-style columns.
pub fn sources(s: &Sources, style: Style) -> String {
    let s = &clean(s);
    let note = s.secrets_unreadable.as_ref().map(|why| style.yellow(&format!("note: {why}")) + "\n").unwrap_or_default();
    if s.sources.is_empty() {
        return match &s.namespace {
            Some(ns) => format!("{note}No versioned ConfigMaps found in {ns} namespace.\n"),
            None => format!("{note}No versioned ConfigMaps found.\n"),
        };
    }
    let all = s.namespace.is_none();
    let mut header = vec!["NAME", "SNAPSHOTS", "HEAD", "WORKLOADS", "BEHIND", "HELD"];
    if all {
        header.insert(0, "NAMESPACE");
    }
    let rows: Vec<Vec<String>> = s
        .sources
        .iter()
        .map(|r| {
            let name = if r.exists { r.name.clone() } else { format!("{} (deleted)", r.name) };
            let mut row = vec![
                name,
                r.snapshots.to_string(),
                r.head.clone().unwrap_or_else(|| "<none>".into()),
                r.workloads.to_string(),
                r.behind.to_string(),
                r.held.to_string(),
            ];
            if all {
                row.insert(0, r.namespace.clone());
            }
            row
        })
        .collect();
    let behind_col = header.len() - 2;
    note + &table(&header, &rows, style, |_, col, cell| if col == behind_col && cell != "0" { style.yellow(cell) } else { cell.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert!(matches!(escape("pricing-config v2\tok é ü 中"), Cow::Borrowed(_)), "printable text and tabs as they are");
        let cases = [
            ("a\x1b[2Kb", "a\\x1b[2Kb"),
            ("line\rover", "line\\rover"),
            ("two\nlines", "two\\nlines"),
            ("\x00\x07\x7f", "\\x00\\x07\\x7f"),
            ("\u{9b}2J\u{85}", "\\u{9b}2J\\u{85}"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            ("\u{202a}\u{202b}\u{202c}\u{202d}", "\\u{202a}\\u{202b}\\u{202c}\\u{202d}"),
            ("\u{2066}\u{2067}\u{2068}\u{2069}", "\\u{2066}\\u{2067}\\u{2068}\\u{2069}"),
            ("\u{200e}\u{200f}\u{061c}\u{2028}", "\\u{200e}\\u{200f}\\u{61c}\\u{2028}"),
        ];
        for (raw, shown) in cases {
            assert_eq!(escape(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn clean_escapes_every_string_of_a_model_keys_included() {
        let w = WorkloadRef { kind: "Deployment".into(), name: "a\x1bb".into() };
        assert_eq!(clean(&w).name, "a\\x1bb");
        let mut m = std::collections::BTreeMap::new();
        m.insert("k\u{202e}".to_owned(), vec!["v\r".to_owned()]);
        let cleaned = clean(&m);
        assert_eq!(cleaned.get("k\\u{202e}").map(Vec::as_slice), Some(&["v\\r".to_owned()][..]));
    }
}
