//! Resident memory of another process, from /proc (Linux).

/// Finds the pid of a running process by executable name: the most recently started
/// one that is not a zombie (a just-stopped predecessor may still be exiting).
pub fn find_pid(process_name: &str) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            // comm is truncated to 15 characters ("npcmem-ingest" fits).
            if name.trim() != process_name {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Fields after the parenthesised command: state is the 1st, starttime the 20th.
            let after_command = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = after_command.split_whitespace().collect();
            let state = *fields.first()?;
            let start_time: u64 = fields.get(19)?.parse().ok()?;
            (state != "Z" && state != "X").then_some((start_time, pid))
        })
        .max()
        .map(|(_, pid)| pid)
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
