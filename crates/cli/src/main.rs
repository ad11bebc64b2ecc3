//! The `mrshim` command line tool: a thin dispatcher; each subcommand lives in its own module.
use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod analyze;
mod color;
mod doctor;
mod elf_check;
mod exec;
mod generate;
mod progress;
mod sim;
mod sim_netns;
mod sim_netns_shared;
mod sim_view;

#[derive(Parser)]
#[command(
    name = "mrshim",
    version,
    about = "Record, explain and rescue RDMA memory registrations",
    after_help = "Environment variables of libmrshim.so: `mrshim --help`.",
    after_long_help = exec::ENV_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Analyze shim records and NCCL/MCCL/RCCL/UCX/Open MPI/perftest logs: root cause and fix.
    Analyze(analyze::Args),
    /// Check this node's configuration for RDMA memory registration.
    Doctor(doctor::Args),
    /// Run a command with libmrshim.so preloaded.
    Exec(exec::Args),
    /// Run a command on the simulated verbs device (and GPU runtime).
    Sim(sim::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(generate::CompletionArgs),
    /// Write the man pages (mrshim.1, mrshim-SUBCOMMAND.1) into a directory.
    #[command(hide = true)]
    Man(generate::ManArgs),
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Analyze(a) => analyze::run(a),
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Exec(a) => exec::run(a),
        Cmd::Sim(a) => sim::run(a),
        Cmd::Completions(a) => generate::completions(a),
        Cmd::Man(a) => generate::man(a),
    }
}
