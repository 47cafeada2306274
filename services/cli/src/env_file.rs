//! The endpoints `deploy/local/up` chose, read from the `.local/env` it writes (or the
//! file `NPCMEM_ENV_FILE` names), so the CLI — the demo included — finds the running
//! system after any `up` without copying URLs by hand. Variables already set win.

use std::path::{Path, PathBuf};

const FILE: &str = ".local/env";

/// `NPCMEM_*` assignments of the env file that the environment does not already set.
pub fn endpoints() -> Vec<(String, String)> {
    let Some(path) = locate() else { return Vec::new() };
    let Ok(text) = std::fs::read_to_string(&path) else { return Vec::new() };
    parse(&text).into_iter().filter(|(key, _)| std::env::var_os(key).is_none()).collect()
}

/// `NPCMEM_ENV_FILE`, else `.local/env` in the working directory or an ancestor, else in
/// an ancestor of the binary (`target/release/npcmem` inside the repository).
fn locate() -> Option<PathBuf> {
    if let Some(explicit) = std::env::var_os("NPCMEM_ENV_FILE") {
        return Some(PathBuf::from(explicit));
    }
    let in_ancestors = |start: &Path| start.ancestors().map(|dir| dir.join(FILE)).find(|path| path.is_file());
    std::env::current_dir()
        .ok()
        .and_then(|dir| in_ancestors(&dir))
        .or_else(|| std::env::current_exe().ok().and_then(|exe| in_ancestors(&exe)))
}

/// `export NPCMEM_X=value` lines, values as bash's `printf %q` writes them.
fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let assignment = line.strip_prefix("export ").unwrap_or(line);
            let (key, value) = assignment.split_once('=')?;
            let key = key.trim();
            if !key.starts_with("NPCMEM_") || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return None;
            }
            Some((key.to_string(), unquote(value.trim())))
        })
        .collect()
}

fn unquote(value: &str) -> String {
    if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        return inner.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_up_writes_and_nothing_else() {
        let text = "# Written by deploy/local/up\nexport NPCMEM_NATS_URL=nats://127.0.0.1:4333\n\
                    export NPCMEM_DATABASE_URL=postgres://postgres@127.0.0.1:5433/npcmem\n\
                    export NPCMEM_NATS_PASSWORD=p\\$ss\\ word\nexport PATH=/evil\nexport NPCMEM_X\n";
        assert_eq!(
            parse(text),
            vec![
                ("NPCMEM_NATS_URL".into(), "nats://127.0.0.1:4333".into()),
                ("NPCMEM_DATABASE_URL".into(), "postgres://postgres@127.0.0.1:5433/npcmem".into()),
                ("NPCMEM_NATS_PASSWORD".into(), "p$ss word".into()),
            ]
        );
    }
}
