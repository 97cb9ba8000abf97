//! The environment fallbacks of the flags: `ZAC_<NAME>` (`ZAC_LISTEN_ADDRESS` for
//! `--listen-address`), so that no variable the platform or a neighbour sets is read by mistake.
//! Four keep the names the ecosystem sets them by: `KUBECONFIG`, `RUST_LOG`, and `POD_NAME` and
//! `POD_NAMESPACE` from the downward API.
//!
//! Until the next release the name without the prefix is still read when the prefixed one is
//! unset, with a warning. A service-link variable (`<SERVICE>_PORT=tcp://10.0.0.1:80`, which the
//! kubelet injects for every Service of the pod's namespace unless `enableServiceLinks: false`)
//! is never taken for a flag's value: a Service named `discover` no longer breaks the start.

use std::ffi::OsString;
use std::sync::Mutex;

use clap::{Arg, Command, Parser};

/// The prefix of every flag's variable but the four conventional ones.
pub const PREFIX: &str = "ZAC_";

/// Notices of the last [`parse`], logged once logging is set up ([`take_notices`]).
static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// `T::parse()` with the fallbacks above: exits with clap's message on bad flags, as `parse` does.
pub fn parse<T: Parser>() -> T {
    let (mut command, notices) = resolve(T::command(), |name| std::env::var_os(name));
    if let Ok(mut kept) = NOTICES.lock() {
        *kept = notices;
    }
    let mut matches = command.clone().get_matches();
    T::from_arg_matches_mut(&mut matches).unwrap_or_else(|error| error.format(&mut command).exit())
}

/// The notices of [`parse`] (deprecated names read, service links ignored), once.
pub fn take_notices() -> Vec<String> {
    NOTICES
        .lock()
        .map(|mut kept| std::mem::take(&mut *kept))
        .unwrap_or_default()
}

/// Points each prefixed flag at the variable it reads for this start, given the environment
/// `lookup`: the prefixed name, else the old one while that is set; neither when the value is a
/// service link. Returns the command and what to warn about.
pub fn resolve(
    command: Command,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> (Command, Vec<String>) {
    let mut notices = Vec::new();
    let command = command.mut_args(|arg| {
        let Some(name) = arg
            .get_env()
            .and_then(|name| name.to_str())
            .map(str::to_owned)
        else {
            return arg;
        };
        let Some(old) = name.strip_prefix(PREFIX).map(str::to_owned) else {
            return arg;
        };
        if let Some(value) = lookup(&name) {
            if !is_service_link(&name, &value) {
                return arg;
            }
            notices.push(ignored(&name, &value, &arg));
            return arg.env(None::<&'static str>);
        }
        match lookup(&old) {
            Some(value) if is_service_link(&old, &value) => {
                notices.push(ignored(&old, &value, &arg));
                arg
            }
            Some(_) => {
                notices.push(format!(
                    "the environment variable {old} is deprecated and will not be read after this \
                     release: set {name} instead"
                ));
                arg.env(old)
            }
            None => arg,
        }
    });
    (command, notices)
}

/// The variables of `command`'s flags that neither carry the prefix nor are one of the four
/// conventional names: a binary's tests assert there are none.
pub fn unprefixed(command: &Command) -> Vec<String> {
    const CONVENTIONAL: [&str; 4] = ["KUBECONFIG", "RUST_LOG", "POD_NAME", "POD_NAMESPACE"];
    command
        .get_arguments()
        .filter_map(|arg| arg.get_env()?.to_str())
        .filter(|name| !name.starts_with(PREFIX) && !CONVENTIONAL.contains(name))
        .map(str::to_owned)
        .collect()
}

/// `<SERVICE>_PORT=<protocol>://<ip>:<port>`, as the kubelet writes it for a Service.
fn is_service_link(name: &str, value: &OsString) -> bool {
    let Some(value) = value.to_str() else {
        return false;
    };
    name.ends_with("_PORT")
        && ["tcp://", "udp://", "sctp://"]
            .iter()
            .any(|scheme| value.starts_with(scheme))
}

fn ignored(name: &str, value: &OsString, arg: &Arg) -> String {
    let flag = arg.get_long().unwrap_or_else(|| arg.get_id().as_str());
    format!(
        "ignored {name}={}: a Service's link variable, not a value for --{flag} (set \
         enableServiceLinks: false on the pod, or pass --{flag})",
        value.to_string_lossy()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use clap::{CommandFactory, Parser};

    use super::*;

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long, env = "ZAC_DISCOVER_PORT", default_value_t = 9090)]
        discover_port: u16,
        #[arg(long, env = "ZAC_LISTEN_ADDRESS", default_value = "[::]:8080")]
        listen_address: String,
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<String>,
    }

    #[test]
    fn the_prefixed_name_wins_and_the_old_one_is_read_with_a_warning() {
        let (command, notices) = resolve(Args::command(), |name| match name {
            "ZAC_LISTEN_ADDRESS" => Some("127.0.0.1:1".into()),
            "LISTEN_ADDRESS" => Some("127.0.0.1:2".into()),
            "DISCOVER_PORT" => Some("9091".into()),
            _ => None,
        });
        let env = |id: &str| {
            command
                .get_arguments()
                .find(|arg| arg.get_id() == id)
                .and_then(|arg| arg.get_env())
                .and_then(|name| name.to_str())
                .map(str::to_owned)
        };
        assert_eq!(env("listen_address").as_deref(), Some("ZAC_LISTEN_ADDRESS"));
        assert_eq!(env("discover_port").as_deref(), Some("DISCOVER_PORT"));
        assert_eq!(env("kubeconfig").as_deref(), Some("KUBECONFIG"));
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].contains("DISCOVER_PORT is deprecated")
                && notices[0].contains("ZAC_DISCOVER_PORT"),
            "{notices:?}"
        );
    }

    #[test]
    fn a_service_link_is_never_a_value() {
        // What the kubelet sets for a Service named `discover` (or `zac-discover`).
        for name in ["DISCOVER_PORT", "ZAC_DISCOVER_PORT"] {
            let (command, notices) = resolve(Args::command(), |asked| {
                (asked == name).then(|| "tcp://10.96.0.12:80".into())
            });
            let port = command
                .get_arguments()
                .find(|arg| arg.get_id() == "discover_port")
                .unwrap();
            assert_ne!(
                port.get_env().and_then(|n| n.to_str()),
                Some(name),
                "{name} must not be read"
            );
            assert_eq!(notices.len(), 1, "{notices:?}");
            assert!(
                notices[0].starts_with(&format!("ignored {name}=tcp://")),
                "{notices:?}"
            );
            assert!(notices[0].contains("--discover-port"), "{notices:?}");
        }
        // A port number under the prefixed name is still one.
        let (command, notices) = resolve(Args::command(), |asked| {
            (asked == "ZAC_DISCOVER_PORT").then(|| "9093".into())
        });
        assert!(notices.is_empty());
        let port = command
            .get_arguments()
            .find(|arg| arg.get_id() == "discover_port")
            .unwrap();
        assert_eq!(
            port.get_env().and_then(|n| n.to_str()),
            Some("ZAC_DISCOVER_PORT")
        );
    }

    #[test]
    fn nothing_set_reads_the_prefixed_names_quietly() {
        let (command, notices) = resolve(Args::command(), |_| None);
        assert!(notices.is_empty());
        let help = command.clone().render_long_help().to_string();
        assert!(help.contains("ZAC_DISCOVER_PORT"), "{help}");
        assert!(help.contains("ZAC_LISTEN_ADDRESS"), "{help}");
    }

    #[test]
    fn unprefixed_names_are_found() {
        assert!(unprefixed(&Args::command()).is_empty());
        #[derive(Debug, Parser)]
        struct Old {
            #[arg(long, env = "AUTH")]
            auth: Option<String>,
        }
        assert_eq!(unprefixed(&Old::command()), ["AUTH"]);
    }
}
