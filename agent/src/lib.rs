//! The NodeWright package agent: a drop-in replacement for the upstream Python agent.
//!
//! The operator runs it once per mode with the node's root filesystem mounted; it validates the
//! package's `config.json`, runs the mode's step scripts on the host through `chroot`, records
//! flags, history and logs on the host, and exits 0 or 1. See `docs/agent.md` and the behaviour
//! specification (`spec/agent.md`); module docs cite its sections.

#![deny(missing_docs)]
// Only `exec` and `signals` call into libc, each block allowed with a SAFETY comment.
#![deny(unsafe_code)]

pub mod checks;
pub mod cli;
pub mod config;
pub mod env;
pub mod exec;
pub mod flags;
pub mod history;
pub mod hostfs;
pub mod interrupts;
pub mod layout;
pub mod modes;
pub mod names;
pub mod pyrepr;
pub mod reboot;
pub mod signals;
pub mod timefmt;
pub mod uninstall;
pub mod upgrade;
pub mod validate;

use std::time::Duration;

use crate::env::{AgentEnv, ResourceId};
use crate::exec::Runner;
use crate::layout::Layout;

/// Anything that ends an invocation with exit 1 outside a step's own failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command line.
    #[error(transparent)]
    Cli(#[from] cli::Error),
    /// Bad agent environment.
    #[error(transparent)]
    Env(#[from] env::Error),
    /// Invalid `config.json`.
    #[error("invalid config.json: {0}")]
    Config(#[from] config::Error),
    /// Unreadable or malformed history.
    #[error(transparent)]
    History(#[from] history::Error),
    /// Bad interrupt payload.
    #[error(transparent)]
    Interrupt(#[from] interrupts::Error),
    /// Interrupt mode needs a payload.
    #[error("interrupt mode needs a payload argument")]
    MissingPayload,
    /// Interrupt mode needs the resource id (§16 Q3).
    #[error(
        "SKYHOOK_RESOURCE_ID {0:?} is not <nodewright>-<uid>-<generation>_<package>_<version> \
         with a valid package name and version"
    )]
    ResourceId(String),
    /// The boot id could not be read before a reboot.
    #[error("cannot read the host boot id from {0}")]
    BootId(String),
    /// Filesystem operation on host state failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// Path involved.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Builds an [`Error::Io`] mapper.
pub(crate) fn io_err(
    what: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> Error + use<> {
    let path = path.display().to_string();
    move |source| Error::Io { what, path, source }
}

/// Everything one invocation needs.
#[derive(Debug, Clone)]
pub struct Context {
    /// Parsed arguments.
    pub args: cli::Args,
    /// Agent environment snapshot.
    pub env: AgentEnv,
    /// Host-state paths.
    pub layout: Layout,
    /// Command runner.
    pub runner: Runner,
    /// Pause before each step.
    pub step_delay: Duration,
    /// Shutdown window after a successful `reboot`.
    pub reboot_wait: Duration,
}

impl Context {
    /// Builds the context from arguments and environment.
    pub fn new(args: cli::Args, env: AgentEnv) -> Result<Self> {
        let layout = Layout {
            root_mount: args.root_mount.clone(),
            root_dir: env.root_dir().to_string(),
            log_dir: env.log_dir().to_string(),
        };
        let runner = Runner {
            root_mount: args.root_mount.clone(),
            no_chroot: env.no_chroot(),
            buffer_limit: env.buffer_limit()?,
        };
        Ok(Self {
            step_delay: env.step_delay()?,
            reboot_wait: env.reboot_wait()?,
            args,
            env,
            layout,
            runner,
        })
    }

    /// The package copy as seen from the agent.
    pub fn package_dir(&self) -> std::path::PathBuf {
        self.layout.host(&self.args.copy_dir)
    }
}

/// Prints the start-up banner in upstream's layout (§3.3), so people and tools reading pod logs
/// find the same lines.
fn banner(ctx: &Context) {
    let rid = ResourceId::parse(ctx.env.resource_id());
    let (pkg, ver) = rid.as_ref().map_or(("unknown", "unknown"), |r| {
        (r.package.as_str(), r.version.as_str())
    });
    let l = &ctx.layout;
    let b = pyrepr::py_bool;
    println!("{}", "-".repeat(20));
    println!("-CLI CONFIGURATION--");
    println!("mode: {}", ctx.args.mode);
    println!("root_mount: {}", ctx.args.root_mount);
    println!("copy_dir: {}", ctx.args.copy_dir);
    println!(
        "interrupt_data: {}",
        ctx.args.payload.as_deref().unwrap_or("None")
    );
    println!("always_run_step: {}", b(ctx.env.always_run()));
    println!("-ENV CONFIGURATION--");
    println!("COPY_RESOLV: {}", b(ctx.env.copy_resolv()));
    println!("OVERLAY_ALWAYS_RUN_STEP: {}", b(ctx.env.always_run()));
    println!("SKYHOOK_RESOURCE_ID: {}", ctx.env.resource_id());
    println!("SKYHOOK_DATA_DIR: {}", ctx.env.data_dir());
    println!("SKYHOOK_ROOT_DIR: {}", l.root_dir);
    println!("SKYHOOK_LOG_DIR: {}", l.log_dir);
    println!("SKYHOOK_AGENT_BUFFER_LIMIT: {}", ctx.runner.buffer_limit);
    println!("SKYHOOK_AGENT_WRITE_LOGS: {}", b(ctx.env.write_logs()));
    println!("Directory CONFIGURATION");
    println!("flag_dir: {}/flags/{pkg}/{ver}", l.root_dir);
    println!("log_dir: {}/{pkg}/{ver}", l.log_dir);
    println!("history_file: {}/history/{pkg}.json", l.root_dir);
    if ctx.runner.no_chroot {
        println!(
            "sandbox: {}=1, steps run without chroot",
            env::NO_CHROOT_VAR
        );
    }
    println!("agent: nodewright-agent {}", env!("CARGO_PKG_VERSION"));
    println!("{}", "-".repeat(20));
}

/// Runs one invocation and returns its exit code (§3.4). `argv` excludes the program name.
pub fn run(argv: &[String], env: AgentEnv) -> i32 {
    if argv.first().map(String::as_str) == Some("validate") {
        return validate::run(&argv[1..]);
    }
    match run_inner(argv, env) {
        Ok(code) => code,
        Err(e) => {
            // §14: an error raised after SIGTERM ends quietly.
            if !signals::terminated() {
                eprintln!("ERROR: {e}");
            }
            1
        }
    }
}

fn run_inner(argv: &[String], env: AgentEnv) -> Result<i32> {
    let args = cli::parse(argv)?;
    let ctx = Context::new(args, env)?;
    // Interrupt mode names its flag and log paths after the resource id: refuse a malformed
    // one before anything is written to the host.
    if ctx.args.mode == "interrupt" && ResourceId::parse(ctx.env.resource_id()).is_none() {
        return Err(Error::ResourceId(ctx.env.resource_id().to_string()));
    }
    if ctx.env.copy_resolv() {
        let dst = ctx.layout.host("/etc/resolv.conf");
        let src = std::path::Path::new("/etc/resolv.conf");
        hostfs::copy_resolv(src, &dst).map_err(io_err("cannot copy resolv.conf to", &dst))?;
    }
    banner(&ctx);
    if !cli::is_known_mode(&ctx.args.mode) {
        eprintln!("{}", cli::unknown_mode_warning(&ctx.args.mode));
        return Ok(0);
    }
    let pkg = ctx.package_dir();
    let outcome = hostfs::ensure_copy_dir(
        &pkg,
        std::path::Path::new(ctx.env.data_dir()),
        std::path::Path::new(hostfs::NODE_FILES_DIR),
    )
    .map_err(io_err("cannot create the package copy", &pkg))?;
    match outcome {
        hostfs::CopyOutcome::Existing => {}
        hostfs::CopyOutcome::Copied => {
            println!("Copied {} to {}", ctx.env.data_dir(), pkg.display());
        }
        hostfs::CopyOutcome::CreatedEmpty => println!(
            "WARNING: {} does not exist and neither does {}; created it empty",
            pkg.display(),
            ctx.env.data_dir()
        ),
    }
    if ctx.args.mode == "interrupt" {
        return interrupts::run(&ctx);
    }
    modes::run(&ctx)
}
