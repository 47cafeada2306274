//! `npcmem export` / `npcmem import`: whole NPCs or the whole world
//! as JSON lines. The first line is a header (format version, scope, row counts per
//! table); each further line is one row, `{"table":"memories","row":{…}}`, in the column
//! form Postgres gives (`to_jsonb`), so an import reproduces it exactly. Import is
//! idempotent: a row whose key exists is left alone, so the same file twice changes
//! nothing. Long runs draw a progress bar on stderr.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt as _;
use npcmem_store::admin;
use npcmem_store::export::{self, Scope, TABLES};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Context;
use crate::error::CliError;

/// The export format's version (the header's `npcmem_export`).
const FORMAT_VERSION: u64 = 1;
/// Rows per insert statement on import.
const IMPORT_BATCH: usize = 1_000;

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Export only these NPCs (repeat or comma-separate); without it, the whole world.
    #[arg(long = "npc", value_delimiter = ',')]
    pub npcs: Vec<Uuid>,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Draw a progress bar on stderr (the default when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A file written by `npcmem export`.
    pub file: PathBuf,
    /// Draw a progress bar on stderr (the default when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
}

/// A progress bar on stderr, redrawn at most ten times a second.
struct Progress {
    label: &'static str,
    total: u64,
    done: u64,
    enabled: bool,
    drawn_at: Option<Instant>,
}

impl Progress {
    fn new(label: &'static str, total: u64, asked: bool) -> Self {
        Self { label, total, done: 0, enabled: asked || std::io::stderr().is_terminal(), drawn_at: None }
    }

    fn advance(&mut self, by: u64) {
        self.done += by;
        if self.enabled && self.drawn_at.is_none_or(|at| at.elapsed() >= Duration::from_millis(100)) {
            self.draw();
        }
    }

    fn draw(&mut self) {
        const WIDTH: u64 = 30;
        let fraction = if self.total == 0 { 1.0 } else { (self.done as f64 / self.total as f64).min(1.0) };
        let filled = (fraction * WIDTH as f64) as u64;
        let bar: String = (0..WIDTH).map(|i| if i < filled { '#' } else { '.' }).collect();
        eprint!("\r{} [{bar}] {:>3.0}% {}/{}", self.label, fraction * 100.0, self.done, self.total);
        self.drawn_at = Some(Instant::now());
    }

    fn finish(&mut self) {
        if self.enabled {
            self.draw();
            eprintln!();
        }
    }
}

pub async fn export(context: &Context, args: ExportArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let scope = if args.npcs.is_empty() { Scope::World } else { Scope::Npcs(args.npcs.clone()) };
    let pool = context.postgres().await?;
    let mut connection = pool.acquire().await?;
    // One snapshot for every table: the file is consistent even while the services write.
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").execute(&mut *connection).await?;
    let tables: Vec<&export::Table> = TABLES.iter().filter(|table| table.in_scope(&scope)).collect();
    let mut counts = BTreeMap::new();
    for table in &tables {
        counts.insert(table.name, table.count(&mut connection, &scope).await?);
    }
    let total: i64 = counts.values().sum();
    let mut file_writer;
    let writer: &mut dyn Write = match &args.output {
        Some(path) => {
            let file = File::create(path)
                .map_err(|error| CliError::BadInput(format!("cannot create {}: {error}", path.display())))?;
            file_writer = BufWriter::new(file);
            &mut file_writer
        }
        None => out,
    };
    let header = json!({
        "npcmem_export": FORMAT_VERSION,
        "scope": if args.npcs.is_empty() { "world" } else { "npcs" },
        "npc_ids": args.npcs,
        "exported_at": Utc::now(),
        "counts": counts,
    });
    writeln!(writer, "{header}")?;
    let mut progress = Progress::new("export", total as u64, args.progress);
    for table in &tables {
        let mut rows = table.rows(&mut connection, &scope);
        while let Some(row) = rows.next().await {
            // The row is already JSON text from Postgres; splice it in rather than re-encode.
            writeln!(writer, "{{\"table\":\"{}\",\"row\":{}}}", table.name, row?)?;
            progress.advance(1);
        }
    }
    writer.flush()?;
    progress.finish();
    sqlx::query("COMMIT").execute(&mut *connection).await?;
    if let Some(path) = &args.output {
        writeln!(out, "exported {total} rows from {} tables to {}", tables.len(), path.display())?;
    }
    Ok(())
}

/// One parsed line of an export file.
fn parse_row(line: &str, number: usize) -> Result<(&'static export::Table, Value), CliError> {
    let bad = |what: String| CliError::BadInput(format!("line {number}: {what}"));
    let mut value: Value = serde_json::from_str(line).map_err(|error| bad(format!("not JSON: {error}")))?;
    let name = value.get("table").and_then(Value::as_str).ok_or_else(|| bad("no \"table\"".into()))?;
    let table = export::table(name).ok_or_else(|| bad(format!("unknown table {name:?}")))?;
    match value.get_mut("row").map(Value::take) {
        Some(row @ Value::Object(_)) => Ok((table, row)),
        _ => Err(bad("\"row\" is not an object".into())),
    }
}

pub async fn import(context: &Context, args: ImportArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let file = File::open(&args.file)
        .map_err(|error| CliError::BadInput(format!("cannot read {}: {error}", args.file.display())))?;
    let size = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
    let mut lines = BufReader::new(file).lines().enumerate();
    let bad_file =
        |what: String| CliError::BadInput(format!("{} is not an npcmem export: {what}", args.file.display()));
    let header: Value = match lines.next() {
        Some((_, Ok(line))) => serde_json::from_str(&line).map_err(|error| bad_file(format!("line 1: {error}")))?,
        Some((_, Err(error))) => return Err(bad_file(error.to_string())),
        None => return Err(bad_file("the file is empty".into())),
    };
    if header.get("npcmem_export").and_then(Value::as_u64) != Some(FORMAT_VERSION) {
        return Err(bad_file(format!("line 1 must be a header with \"npcmem_export\": {FORMAT_VERSION}")));
    }
    let expected: BTreeMap<String, u64> = serde_json::from_value(header.get("counts").cloned().unwrap_or_default())
        .map_err(|error| bad_file(format!("line 1: counts: {error}")))?;

    let pool = context.postgres().await?;
    // All or nothing: a bad line anywhere leaves the database as it was.
    let mut transaction = pool.begin().await?;
    let mut seen: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut inserted: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut batch: Vec<Value> = Vec::new();
    let mut batch_table: Option<&'static export::Table> = None;
    let mut progress = Progress::new("import", size, args.progress);
    for (index, line) in lines {
        let line = line.map_err(|error| bad_file(format!("line {}: {error}", index + 1)))?;
        progress.advance(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let (table, row) = parse_row(&line, index + 1)?;
        if batch_table.is_some_and(|current| current.name != table.name) || batch.len() >= IMPORT_BATCH {
            let current = batch_table.expect("a batch has a table");
            *inserted.entry(current.name).or_default() += current.import(&mut transaction, &batch).await?;
            batch.clear();
        }
        batch_table = Some(table);
        batch.push(row);
        *seen.entry(table.name).or_default() += 1;
    }
    if let Some(table) = batch_table {
        *inserted.entry(table.name).or_default() += table.import(&mut transaction, &batch).await?;
    }
    progress.finish();
    for (table, count) in &expected {
        let found = seen.get(table.as_str()).copied().unwrap_or(0);
        if found != *count {
            return Err(bad_file(format!(
                "the header promises {count} {table} rows, the file has {found} (truncated?)"
            )));
        }
    }
    let details = json!({ "file": args.file.display().to_string(), "rows": seen, "inserted": inserted });
    admin::record_action(&mut transaction, &actor, "import", &details).await?;
    transaction.commit().await?;
    let mut table = crate::table::Table::new(&["table", "rows in file", "inserted", "already there"]);
    for (name, rows) in &seen {
        let new = inserted.get(name).copied().unwrap_or(0);
        table.row(vec![name.to_string(), rows.to_string(), new.to_string(), (rows - new).to_string()]);
    }
    table.write(out)?;
    // Imported pairs may be cached with their old state.
    context.invalidate_caches(&[npcmem_core::wire::CacheInvalidate { npc_id: None, player_id: None }]).await;
    Ok(())
}
