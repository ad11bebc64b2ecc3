use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("mrshim analyze: not implemented yet");
    ExitCode::from(2)
}
