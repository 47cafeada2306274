//! Resident memory of another process, from /proc (Linux).

/// Finds the pid of a running process by executable name.
pub fn find_pid(process_name: &str) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        // comm is truncated to 15 characters ("npcmem-ingest" fits).
        (name.trim() == process_name).then_some(pid)
    })
}

/// (current RSS, peak RSS) in KiB: `VmRSS` and `VmHWM` of /proc/PID/status.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|value| value.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}
