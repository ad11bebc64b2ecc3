//! When to colour: `--color always|never`, else the conventions users set once for every tool:
//! `NO_COLOR` (any non-empty value) turns colour off, `CLICOLOR_FORCE` (non-empty, not "0") turns it on
//! even into a pipe, `CLICOLOR=0` turns it off; otherwise colour only on a terminal.
use std::io::IsTerminal;

pub fn wanted(flag: &str, terminal: bool) -> bool {
    decide(flag, terminal, |k| std::env::var(k).ok())
}

fn decide(flag: &str, terminal: bool, env: impl Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    match flag {
        "always" => true,
        "never" => false,
        _ if set("NO_COLOR") => false,
        _ if set("CLICOLOR_FORCE") && env("CLICOLOR_FORCE").as_deref() != Some("0") => true,
        _ if env("CLICOLOR").as_deref() == Some("0") => false,
        _ => terminal,
    }
}

/// Colour for stdout.
pub fn stdout(flag: &str) -> bool {
    wanted(flag, std::io::stdout().is_terminal())
}

#[cfg(test)]
mod tests {
    use super::decide;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
    }

    #[test]
    fn conventions() {
        assert!(decide("auto", true, env(&[])));
        assert!(!decide("auto", false, env(&[])));
        assert!(!decide("auto", true, env(&[("NO_COLOR", "1")])));
        assert!(decide("auto", true, env(&[("NO_COLOR", "")])), "an empty NO_COLOR is unset");
        assert!(decide("auto", false, env(&[("CLICOLOR_FORCE", "1")])));
        assert!(!decide("auto", false, env(&[("CLICOLOR_FORCE", "0")])));
        assert!(!decide("auto", false, env(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")])), "NO_COLOR wins");
        assert!(!decide("auto", true, env(&[("CLICOLOR", "0")])));
        assert!(decide("always", false, env(&[("NO_COLOR", "1")])), "the flag wins");
        assert!(!decide("never", true, env(&[("CLICOLOR_FORCE", "1")])));
    }
}
