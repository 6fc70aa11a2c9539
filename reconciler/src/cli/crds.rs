//! `nodewright crds`: the generated CustomResourceDefinitions.

use std::path::PathBuf;
use std::process::ExitCode;

use super::exit;

/// Long help.
pub const LONG_ABOUT: &str = "\
Print the CustomResourceDefinitions this version serves (NodeWright and DeploymentPolicy, \
group nodewright.nvidia.com, version v1alpha1) as one multi-document YAML stream. They are \
generated from the same types the reconciler uses, so they always match it.";

/// Examples shown after the long help.
pub const EXAMPLES: &str = "\
Examples:
  nodewright crds | kubectl apply -f -
  nodewright crds --out-dir manifests/crds";

/// Arguments of `nodewright crds`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD into this directory instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: Args) -> ExitCode {
    let Some(dir) = args.out_dir else {
        print!("{}", nodewright_schema::crd::all_yaml());
        return ExitCode::from(exit::OK);
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::from(exit::RUNTIME);
    }
    for (file, crd) in nodewright_schema::crd::all() {
        let path = dir.join(file);
        if let Err(e) = std::fs::write(&path, nodewright_schema::crd::to_yaml(&crd)) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(exit::RUNTIME);
        }
        eprintln!("wrote {}", path.display());
    }
    ExitCode::from(exit::OK)
}
