//! The standard `process_*` families (the names of Prometheus' client libraries, which dashboards
//! and the kube-prometheus rules query): prometheus-client has no process collector, so this
//! one reads /proc/self on each scrape. Off Linux (no /proc) it exports nothing.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks a second in /proc's times (`USER_HZ`): 100 on every Linux architecture the
/// image is built for; reading `sysconf(_SC_CLK_TCK)` would take `unsafe`.
const TICKS: f64 = 100.0;

/// What one read of /proc/self says; `None` where a file could not be read or parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

/// `/proc/self/stat` fields after the command (which may hold spaces and parentheses: the last
/// `)` ends it), numbered from 0 = field 3 (`state`) of proc(5).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// utime + stime (fields 14 and 15), in seconds.
pub fn cpu_seconds(stat: &str) -> Option<f64> {
    let f = stat_fields(stat)?;
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / TICKS)
}

/// vsize (field 23), in bytes.
pub fn virtual_bytes(stat: &str) -> Option<f64> {
    stat_fields(stat)?.get(20)?.parse::<u64>().ok().map(|b| b as f64)
}

/// Start time: boot time (`btime` of /proc/stat) plus starttime (field 22, ticks since boot).
pub fn start_time_seconds(stat: &str, proc_stat: &str) -> Option<f64> {
    let ticks: u64 = stat_fields(stat)?.get(19)?.parse().ok()?;
    let btime: u64 = proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(btime as f64 + ticks as f64 / TICKS)
}

/// `VmRSS` of /proc/self/status (kB), in bytes.
pub fn resident_bytes(status: &str) -> Option<f64> {
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb as f64 * 1024.0)
}

/// The soft limit of open files in /proc/self/limits (`unlimited`: none to report).
pub fn max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse::<u64>().ok().map(|n| n as f64)
}

impl Sample {
    /// Reads /proc/self (and /proc/stat for the boot time).
    pub fn read() -> Sample {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let stat = read("/proc/self/stat");
        let stat = stat.as_deref();
        Sample {
            cpu_seconds: stat.and_then(cpu_seconds),
            virtual_bytes: stat.and_then(virtual_bytes),
            start_time_seconds: stat.zip(read("/proc/stat")).and_then(|(s, p)| start_time_seconds(s, &p)),
            resident_bytes: read("/proc/self/status").as_deref().and_then(resident_bytes),
            max_fds: read("/proc/self/limits").as_deref().and_then(max_fds),
            open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64),
        }
    }
}

/// The collector registered in [`super::Metrics`]: a family per value read.
#[derive(Debug)]
pub struct Process;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = Sample::read();
        if let Some(v) = s.cpu_seconds {
            // The text encoding appends `_total` to a counter.
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes", s.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", s.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", s.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", s.max_fds),
            ("process_start_time_seconds", "Start time of the process since unix epoch in seconds", s.start_time_seconds),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str =
        "4242 (tokio (x) y) S 1 4242 4242 0 -1 4194560 2816 0 0 0 250 75 0 0 20 0 9 0 123456 1073741824 6000 18446744073709551615";

    #[test]
    fn stat_fields_count_after_a_command_with_spaces_and_parentheses() {
        assert_eq!(cpu_seconds(STAT), Some(3.25));
        assert_eq!(virtual_bytes(STAT), Some(1073741824.0));
        assert_eq!(start_time_seconds(STAT, "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), Some(1700001234.56));
        assert_eq!(cpu_seconds("4242 (no fields)"), None);
        assert_eq!(start_time_seconds(STAT, "cpu 1\n"), None, "no btime");
    }

    #[test]
    fn status_and_limits_parse_as_the_kernel_writes_them() {
        assert_eq!(resident_bytes("Name:\tx\nVmSize:\t 3892 kB\nVmRSS:\t    2016 kB\n"), Some(2016.0 * 1024.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_fds(limits), Some(1024.0));
        assert_eq!(max_fds("Max open files            unlimited            unlimited            files\n"), None);
    }

    /// The test process's own /proc: every value is there and plausible.
    #[test]
    fn the_real_proc_of_this_process_reads_plausibly() {
        let s = Sample::read();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let start = s.start_time_seconds.expect("start time");
        assert!(start > 1_500_000_000.0 && start <= now + 1.0, "start {start}, now {now}");
        let rss = s.resident_bytes.expect("rss");
        let vsz = s.virtual_bytes.expect("vsz");
        assert!(rss > 1e6 && rss <= vsz, "rss {rss}, vsz {vsz}");
        let (open, max) = (s.open_fds.expect("open fds"), s.max_fds.expect("max fds"));
        assert!(open >= 3.0 && open < max, "open {open}, max {max}");
        assert!(s.cpu_seconds.expect("cpu") >= 0.0);
        // CPU time grows with work.
        let before = s.cpu_seconds.unwrap();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(7));
        }
        std::hint::black_box(x);
        assert!(Sample::read().cpu_seconds.unwrap() > before, "cpu time did not grow");
    }

    /// The names are the standard ones, with HELP and TYPE, in the registry's output.
    #[test]
    fn the_families_have_the_standard_names() {
        let text = super::super::Metrics::new().render();
        for (name, kind) in [
            ("process_cpu_seconds_total", "counter"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            ("process_start_time_seconds", "gauge"),
        ] {
            // prometheus-client's text encoding names a counter's family with its `_total`.
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}:\n{text}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
            assert!(text.lines().any(|l| l.starts_with(&format!("{name} "))), "{name} has no sample:\n{text}");
        }
    }
}
