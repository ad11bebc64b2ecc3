//! Shell completions and man pages, generated from the clap definitions so they never drift from the
//! real options: `mrshim completions bash|zsh|fish|elvish|powershell` prints a script;
//! `mrshim man DIR` writes mrshim.1 and one mrshim-SUBCOMMAND.1 per subcommand (for packaging).
use clap::CommandFactory;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Directory to write the pages into (created).
    pub dir: PathBuf,
}

pub fn completions(a: CompletionArgs) -> ExitCode {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "mrshim", &mut std::io::stdout());
    ExitCode::SUCCESS
}

pub fn man(a: ManArgs) -> ExitCode {
    match write_pages(&a.dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mrshim man: {}: {e}", a.dir.display());
            ExitCode::from(2)
        }
    }
}

fn write_pages(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let cmd = crate::Cli::command();
    let page = |c: clap::Command, name: &str| -> std::io::Result<()> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(c).render(&mut buf)?;
        std::fs::write(dir.join(format!("{name}.1")), buf)
    };
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("mrshim-{}", sub.get_name());
        page(sub.clone().name(name.clone()), &name)?;
    }
    page(cmd, "mrshim")
}
