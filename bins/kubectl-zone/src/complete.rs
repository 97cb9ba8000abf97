//! Shell completion through kubectl: for `kubectl zone <TAB>`, kubectl runs the executable
//! `kubectl_complete-zone` (shipped beside the plugin: `exec kubectl-zone __complete "$@"`) with
//! the words typed so far and reads cobra's protocol back: one candidate a line, then
//! `:<directive>`. So every shell kubectl completes (bash, zsh, fish, PowerShell) completes the
//! plugin's subcommands and flags, with no script of its own.

use clap::CommandFactory;

/// The hidden first argument kubectl's completion passes.
pub const COMPLETE: &str = "__complete";

/// cobra's ShellCompDirectiveNoFileComp: no file names either.
const NO_FILES: u32 = 4;

/// The completion of the last of `words` (the ones after `kubectl zone`), as kubectl reads it.
pub fn complete<C: CommandFactory>(words: &[String]) -> String {
    let mut command = C::command();
    let (prefix, before) = match words.split_last() {
        Some((last, before)) => (last.as_str(), before),
        None => ("", &[][..]),
    };
    let mut globals: Vec<String> = long_flags(&command, true);
    for word in before {
        let Some(sub) = command.find_subcommand(word).cloned() else {
            continue;
        };
        command = sub;
        globals.extend(long_flags(&command, true));
    }
    let candidates: Vec<String> = if prefix.starts_with('-') {
        let mut flags = long_flags(&command, false);
        flags.extend(globals);
        flags.sort();
        flags.dedup();
        flags
    } else {
        command
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
            .map(|sub| sub.get_name().to_string())
            .collect()
    };
    let mut out: String = candidates
        .into_iter()
        .filter(|candidate| candidate.starts_with(prefix))
        .map(|candidate| format!("{candidate}\n"))
        .collect();
    out.push_str(&format!(":{NO_FILES}\n"));
    out
}

/// `--name` of each flag of `command` (only the global ones when `global`).
fn long_flags(command: &clap::Command, global: bool) -> Vec<String> {
    command
        .get_arguments()
        .filter(|arg| !global || arg.is_global_set())
        .filter_map(|arg| arg.get_long())
        .map(|long| format!("--{long}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn subcommands_and_flags_complete_as_kubectl_asks() {
        assert_eq!(
            complete::<Cli>(&words("")),
            "rollout\nbudget\nshards\ncheck\ndrill\n:4\n"
        );
        assert_eq!(complete::<Cli>(&words("ro")), "rollout\n:4\n");
        assert_eq!(complete::<Cli>(&words("rollout ")), "plan\n:4\n");
        let flags = complete::<Cli>(&words("rollout plan web --"));
        for flag in [
            "--image",
            "--revision",
            "--zone-label",
            "--namespace",
            "--output",
        ] {
            assert!(flags.contains(&format!("{flag}\n")), "{flags}");
        }
        assert_eq!(complete::<Cli>(&words("budget --dr")), "--drain\n:4\n");
        assert_eq!(complete::<Cli>(&words("shards prom --t")), "--to\n:4\n");
    }
}
