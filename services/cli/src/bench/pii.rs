//! `npcmem bench pii`: precision and recall per kind of the PII redactor on generated
//! chat lines (a seed of its own, apart from the tests'), and its throughput on ordinary
//! game text, beside the redactor as it was before issue 20 (US formats only) measured
//! in the same run. In process; needs no service.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use npcmem_core::redact::PiiRedactor;
use npcmem_core::redact::corpus::{self, Case, Kind, Score};

#[derive(Debug, Clone, clap::Args)]
pub struct PiiBenchArgs {
    /// Seed of the generated cases (the unit tests use 20).
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Generated cases per kind.
    #[arg(long, default_value_t = 1_000)]
    cases_per_kind: usize,
    /// Lines of ordinary game text: false alarms are counted on them, and throughput is
    /// measured on them.
    #[arg(long, default_value_t = 5_000)]
    game_lines: usize,
    /// Seconds of redaction per throughput figure.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Print the cases the redactor gets wrong (the first 20 of each kind).
    #[arg(long)]
    show: bool,
}

pub async fn run(args: PiiBenchArgs) -> anyhow::Result<()> {
    let redactor = PiiRedactor::new();
    let baseline = PiiRedactor::us_formats_only();
    let game = corpus::game_text(args.seed, args.game_lines);
    let mut cases: Vec<Case> =
        Kind::ALL.iter().flat_map(|&kind| corpus::cases(kind, args.seed, args.cases_per_kind)).collect();
    cases.extend(game.iter().cloned());
    println!(
        "seed {}: {} cases per kind, {} lines of ordinary game text; a case counts only when the whole line is \
         redacted exactly as expected",
        args.seed, args.cases_per_kind, args.game_lines
    );

    let systems: [(&str, &PiiRedactor); 2] = [("redactor", &redactor), ("US-formats baseline", &baseline)];
    let scores: Vec<BTreeMap<Kind, Score>> =
        systems.iter().map(|(_, system)| corpus::score(&cases, |text| system.redact(text).into_owned())).collect();
    let mut table = crate::table::Table::new(&["kind", "cases", "P", "R", "baseline P", "baseline R"]);
    for kind in Kind::ALL {
        let mut row =
            vec![kind.label().to_owned(), cases.iter().filter(|case| case.kind == Some(kind)).count().to_string()];
        for system in &scores {
            let score = system.get(&kind).copied().unwrap_or_default();
            row.push(percent(score.precision(), score.true_positives, score.true_positives + score.false_positives));
            row.push(percent(score.recall(), score.true_positives, score.true_positives + score.false_negatives));
        }
        table.row(row);
    }
    table.write(&mut std::io::stdout())?;
    for (name, system) in systems {
        let altered = game.iter().filter(|case| system.redact(&case.text) != case.text).count();
        println!("ordinary game text altered by the {name}: {altered} of {} lines", game.len());
    }

    if args.show {
        for kind in Kind::ALL {
            for case in cases
                .iter()
                .filter(|case| case.kind == Some(kind))
                .filter(|case| redactor.redact(&case.text) != case.expected)
                .take(20)
            {
                println!("  {}: {:?} → {:?}", kind.label(), case.text, redactor.redact(&case.text));
            }
        }
    }

    let duration = Duration::from_secs(args.seconds.max(1));
    let ordinary: Vec<&str> = game.iter().map(|case| case.text.as_str()).collect();
    let with_pii: Vec<&str> = cases.iter().filter(|case| case.kind.is_some()).map(|case| case.text.as_str()).collect();
    println!("\nthroughput, one core:");
    for (label, lines) in [("ordinary game text", &ordinary), ("lines holding PII", &with_pii)] {
        let figures: Vec<String> = systems
            .iter()
            .map(|(name, system)| format!("{name} {:.1} MB/s", megabytes_per_second(system, lines, duration)))
            .collect();
        println!("  {label}: {}", figures.join(", "));
    }
    Ok(())
}

/// Redacts `lines` over and over for `duration`; MB (10⁶ bytes) of input per second.
fn megabytes_per_second(redactor: &PiiRedactor, lines: &[&str], duration: Duration) -> f64 {
    let bytes_per_pass: usize = lines.iter().map(|line| line.len()).sum();
    // One pass first, so the lazily built regex states and the phone metadata are warm.
    let mut sink = 0usize;
    for line in lines {
        sink = sink.wrapping_add(redactor.redact(line).len());
    }
    let started = Instant::now();
    let mut passes = 0usize;
    while started.elapsed() < duration {
        for line in lines {
            sink = sink.wrapping_add(redactor.redact(line).len());
        }
        passes += 1;
    }
    std::hint::black_box(sink);
    (bytes_per_pass * passes) as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn percent(value: Option<f64>, hits: usize, of: usize) -> String {
    match value {
        Some(value) => format!("{:.1} % ({hits}/{of})", 100.0 * value),
        None => "-".to_owned(),
    }
}
