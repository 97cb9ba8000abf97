//! Writes the CustomResourceDefinitions of zonecontrol.k8s.aws into a kustomize folder, or checks
//! that the committed ones match the Rust types.
//!
//!     crdgen --out config/crd           # write
//!     crdgen --out config/crd --check   # exit 1 naming the first file that drifted

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage: crdgen --out <dir> [--check]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("crdgen: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut out: Option<PathBuf> = None;
    let mut check = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = args.next().map(PathBuf::from),
            "--check" => check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unexpected argument {other:?}; {USAGE}")),
        }
    }
    let out = out.ok_or_else(|| USAGE.to_string())?;
    for (name, content) in files()? {
        let path = out.join(&name);
        if check {
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            if on_disk != content {
                return Err(format!(
                    "{} is out of date with the Rust types; run `make crds` and commit it",
                    path.display()
                ));
            }
        } else {
            write(&path, &content)?;
        }
    }
    Ok(())
}

/// File name → content, deterministic.
fn files() -> Result<Vec<(String, String)>, String> {
    let header =
        "# Generated from crates/api by `make crds`; edit the Rust types, not this file.\n";
    let mut files = Vec::new();
    let mut names = Vec::new();
    for crd in zone_api::crds() {
        let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        let yaml = serde_norway::to_string(&crd).map_err(|e| format!("serialising {name}: {e}"))?;
        // Each file opens its own document: `helm show crds` joins the chart's crds/ files
        // as they are, and a user pipes that into `kubectl apply -f -` (docs/helm.md).
        files.push((name.clone(), format!("---\n{header}{yaml}")));
        names.push(name);
    }
    let resources: String = names.iter().map(|name| format!("- {name}\n")).collect();
    files.push((
        "kustomization.yaml".to_string(),
        format!(
            "{header}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{resources}"
        ),
    ));
    Ok(files)
}

fn write(path: &Path, content: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    std::fs::write(path, content).map_err(|e| format!("writing {}: {e}", path.display()))
}
