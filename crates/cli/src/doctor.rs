//! `mrshim doctor`: exit 0 = no check failed, 1 = a check failed (or, with --compare, the nodes differ),
//! 2 = bad usage or unreadable input. Documented in docs/doctor.md.
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print the report as JSON (input for `--compare` and for `mrshim analyze`).
    #[arg(long)]
    pub json: bool,
    /// Read /sys, /proc and /usr below this directory instead of the live system (captured trees, tests).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Compare reports written by `mrshim doctor --json` and show what differs between the nodes.
    #[arg(long, num_args = 2.., value_name = "REPORT.json")]
    pub compare: Vec<PathBuf>,
    /// Colour: auto (only on a terminal), always, never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
}

pub fn run(args: Args) -> ExitCode {
    let color = match args.color.as_str() {
        "always" => true,
        "never" => false,
        _ => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let mut out = std::io::stdout().lock();
    if !args.compare.is_empty() {
        let mut reports = Vec::new();
        for p in &args.compare {
            match mrshim_doctor::load(p) {
                Ok(r) => reports.push(r),
                Err(e) => {
                    eprintln!("mrshim doctor: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        let diffs = mrshim_doctor::compare::compare(&reports);
        let text = if args.json {
            mrshim_doctor::compare_json(&diffs)
        } else {
            mrshim_doctor::compare::human(&diffs, reports.len())
        };
        let _ = out.write_all(text.as_bytes());
        return if diffs.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    }
    if !args.root.is_dir() {
        eprintln!("mrshim doctor: --root {}: not a directory", args.root.display());
        return ExitCode::from(2);
    }
    let r = mrshim_doctor::collect(&args.root);
    let text = if args.json { mrshim_doctor::to_json(&r) } else { mrshim_doctor::render::human(&r, color) };
    let _ = out.write_all(text.as_bytes());
    if r.worst() == mrshim_doctor::Status::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
