//! `mrshim analyze PATH...`: exit 0 = registrations seen and none failed, 1 = findings reported,
//! 2 = nothing could be read or nothing in it was recognised (or bad usage). Documented in docs/analyze.md.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Files or directories (recursive) to read; `-` for stdin. Plain text or gzip.
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Print one JSON object (schema in docs/analyze.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report (findings, per-rank timeline, size histogram).
    #[arg(long, value_name = "OUT.html")]
    pub report: Option<PathBuf>,
    /// Also write per-host counters for node_exporter's textfile collector (Prometheus text format).
    #[arg(long, value_name = "FILE.prom")]
    pub prometheus: Option<PathBuf>,
    /// Colour: auto (a terminal, unless NO_COLOR; CLICOLOR_FORCE forces it), always, never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
}

pub fn run(args: Args) -> ExitCode {
    let mut progress = crate::progress::Progress::new();
    let a = mrshim_analyze::analyze_with_progress(&args.paths, &mut |done, n, bytes| progress.update(done, n, bytes));
    progress.done();
    if a.col.files.iter().all(|f| f.error.is_some()) {
        for n in &a.col.notes {
            eprintln!("mrshim analyze: {}", mrshim_analyze::render::human::printable(n));
        }
        eprintln!("mrshim analyze: nothing could be read");
        return ExitCode::from(2);
    }
    if let Some(p) = &args.report {
        if let Err(e) = std::fs::write(p, mrshim_analyze::render::html::render(&a)) {
            eprintln!("mrshim analyze: cannot write {}: {e}", p.display());
            return ExitCode::from(2);
        }
    }
    if let Some(p) = &args.prometheus {
        if let Err(e) = mrshim_analyze::render::prometheus::write(&a, p) {
            eprintln!("mrshim analyze: cannot write {}: {e}", p.display());
            return ExitCode::from(2);
        }
    }
    let out = if args.json {
        mrshim_analyze::render::json::to_string(&a)
    } else {
        mrshim_analyze::render::human::render(&a, crate::color::stdout(&args.color))
    };
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    if !a.findings.is_empty() {
        ExitCode::from(1)
    } else if a.nothing_recognised() {
        eprintln!(
            "mrshim analyze: nothing recognised: no registration, failure or fact in {} input(s); is this the job's stderr, a shim record file or a kernel log?",
            a.col.files.len()
        );
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
