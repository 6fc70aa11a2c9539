//! Step modes (§7): load the config, write `START`, run the steps with the skip rules, evaluate
//! checks, update history and remove flags after an uninstall.

use std::collections::BTreeMap;

use crate::checks::{self, CheckResult, Verdict};
use crate::config::{self, Config, Step};
use crate::env::HOST_ROOT_EXPORT;
use crate::exec::{Invocation, reap_logs};
use crate::flags::{self, Decision};
use crate::pyrepr::{py_bool, repr_int_list, repr_str_list};
use crate::timefmt::utc_log_stamp;
use crate::{Context, Result, history, hostfs, io_err, signals, uninstall, upgrade};

/// Whether `mode` is a check mode.
pub fn is_check_mode(mode: &str) -> bool {
    mode.ends_with("-check")
}

/// Whether `mode` skips the `root_dir` overlay and configmap check.
pub fn is_uninstall_mode(mode: &str) -> bool {
    mode == "uninstall" || mode == "uninstall-check"
}

/// The value of an `env:` argument's variable name: the text after the first `env:`, up to a
/// second `env:` if any (upstream's split).
pub fn env_arg_name(arg: &str) -> Option<&str> {
    let rest = arg.strip_prefix("env:")?;
    Some(rest.split("env:").next().unwrap_or(rest))
}

/// Substitutes `env:NAME` arguments (§10.1). Returns the missing names if any.
pub fn substitute(
    args: &[String],
    env: &BTreeMap<String, String>,
) -> std::result::Result<Vec<String>, Vec<String>> {
    let mut out = Vec::with_capacity(args.len());
    let mut missing = vec![];
    for a in args {
        match env_arg_name(a) {
            Some(name) => match env.get(name) {
                Some(v) => out.push(v.clone()),
                None => missing.push(name.to_string()),
            },
            None => out.push(a.clone()),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

/// Runs a step mode; returns the exit code.
pub fn run(ctx: &Context) -> Result<i32> {
    let mode = ctx.args.mode.as_str();
    let pkg_dir = ctx.package_dir();
    let (config, warnings) = config::load(&pkg_dir)?;
    for w in &warnings {
        eprintln!("{w}");
    }
    if !is_uninstall_mode(mode) {
        let root = std::path::PathBuf::from(&ctx.layout.root_mount);
        hostfs::overlay_root_dir(&pkg_dir, &root)
            .map_err(io_err("cannot overlay root_dir onto", &root))?;
        config::check_config_files(&config, &pkg_dir.join("configmaps"))?;
    }
    let start = ctx.layout.start_flag();
    std::fs::create_dir_all(ctx.layout.flags_dir())
        .and_then(|()| std::fs::write(&start, ""))
        .map_err(io_err("cannot write", &start))?;

    let steps = config.steps(mode);
    if steps.is_empty() {
        eprintln!("WARNING: There are no {mode} steps defined. This will be ran as a no-op.");
    }
    let check = is_check_mode(mode);
    let mut results = vec![];
    for step in steps {
        if signals::terminated() {
            eprintln!("SIGTERM received: not starting step {}", step.path);
            return Ok(1);
        }
        let ok = run_one(ctx, &config, step, &mut results)?;
        if !check && !ok {
            return Ok(1);
        }
    }
    if check && !steps.is_empty() {
        match checks::evaluate(&ctx.layout, mode, steps.len(), &results).map_err(io_err(
            "cannot write check results under",
            &ctx.layout.flags_dir(),
        ))? {
            Verdict::NotAllRan { expected, got } => {
                println!(
                    "It does not look like you have successfully run all check steps yet. \
                     ({got} results for {expected} steps)"
                );
                return Ok(1);
            }
            Verdict::Failed => {
                println!("Checks failed for {mode}");
                return Ok(1);
            }
            Verdict::Passed => println!("All {mode} checks passed"),
        }
    }
    let hist = ctx.layout.history(&config.package_name);
    match mode {
        "apply-check" | "upgrade-check" => history::record(&hist, &config.package_version)?,
        "uninstall-check" => {
            history::record(&hist, "uninstalled")?;
            let flags_dir = ctx.layout.flags_dir();
            let n = uninstall::remove_flags(&ctx.layout, &config)
                .map_err(io_err("cannot remove step flags under", &flags_dir))?;
            println!("Removed {n} step flags of {}", config.package_name);
        }
        _ => {}
    }
    Ok(0)
}

/// Runs one step of the current mode with the skip rules (action) or result recording (check).
/// Returns whether it succeeded (skipped counts as success).
fn run_one(
    ctx: &Context,
    config: &Config,
    step: &Step,
    results: &mut Vec<CheckResult>,
) -> Result<bool> {
    let mode = ctx.args.mode.as_str();
    let marker = flags::marker(&step.arguments, &step.returncodes);
    let flag = ctx.layout.step_flag(
        &config.package_name,
        &config.package_version,
        &step.path,
        &marker,
    );
    let mut injected: Vec<(String, String)> = step.env.clone();
    let mut args = step.arguments.clone();
    if upgrade::is_upgrade_mode(mode) {
        let previous = history::previous_version(&ctx.layout.history(&config.package_name))?;
        injected.extend(upgrade::version_env(&previous, &config.package_version));
        args = upgrade::arguments(step, mode, &previous, &config.package_version);
    }
    let check = is_check_mode(mode);
    if !check {
        let decision = flags::decide(mode, step, flag.exists(), ctx.env.always_run());
        let shown = flag.display();
        match decision {
            Decision::Run => {}
            Decision::RunAlwaysRun => println!(
                "WARNING: {shown} exists for {} but OVERLAY_ALWAYS_RUN_STEP flag is set so running anyway.",
                step.path
            ),
            Decision::RunModeIgnoresFlags => println!(
                "Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway."
            ),
            Decision::RunIdempotenceDisabled => {
                println!("Flag exists but idempotence is Idempotence.Disabled so running step.")
            }
            Decision::Skip => {
                println!("Skipping {} because {shown} exists.", step.path);
                return Ok(true);
            }
        }
    }
    // Upstream prints the arguments after appending upgrade versions, before `env:` substitution.
    println!(
        "{mode} {} {} {} {} {}",
        step.path,
        repr_str_list(&args),
        repr_int_list(&step.returncodes),
        step.idempotence_label(),
        py_bool(step.on_host)
    );
    let outcome = execute(ctx, config, step, &args, &injected);
    let ok = matches!(outcome, StepOutcome::Exited(s) if step.returncodes.contains(&i64::from(s)));
    // A step that could not start (missing `env:` variables, or an error already reported on
    // stderr) prints nothing more: its arguments were echoed once above.
    match outcome {
        StepOutcome::Exited(_) if ok => println!("SUCEEDED: {} {}", step.path, args.join(" ")),
        StepOutcome::Exited(s) => println!("FAILED: {} {} {s}", step.path, args.join(" ")),
        StepOutcome::MissingEnv | StepOutcome::NotStarted => {}
    }
    if check {
        results.push(CheckResult {
            path: step.path.clone(),
            failed: !ok,
        });
    } else if ok {
        flags::write_flag(&flag, step.idempotence).map_err(io_err("cannot write flag", &flag))?;
    }
    Ok(ok)
}

/// How a step's command ended.
enum StepOutcome {
    /// It ran and exited with this status.
    Exited(crate::exec::Status),
    /// An `env:` variable is missing; the step did not run.
    MissingEnv,
    /// The command could not be started; the error is on stderr and in the `.log.err`. Counts
    /// as a failure, like upstream's exit status 1.
    NotStarted,
}

/// The line a failed step leaves in its `.log.err`: the command and how it ended, as the
/// upstream agent's helper reports it there (a `CalledProcessError`), so people reading the
/// log files find the same text.
pub fn failure_line(program: &str, args: &[String], status: i32, returncodes: &[i64]) -> String {
    let mut command = vec![program.to_string()];
    command.extend(args.iter().cloned());
    let command = repr_str_list(&command);
    if status < 0 {
        format!("Command '{command}' died with signal {}.", -status)
    } else if status == 0 {
        format!(
            "Command '{command}' returned exit status 0, which is not in returncodes {}.",
            repr_int_list(returncodes)
        )
    } else {
        format!("Command '{command}' returned non-zero exit status {status}.")
    }
}

/// Appends `line` to a step's `.log.err`; best effort, like every log write: a full disk must
/// not change the step's outcome.
fn append_err_log(err_log: &std::path::Path, line: &str) {
    use std::io::Write as _;
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(err_log) {
        let _ = writeln!(f, "{line}");
    }
}

/// Runs a step after `env:` substitution.
fn execute(
    ctx: &Context,
    config: &Config,
    step: &Step,
    args: &[String],
    injected: &[(String, String)],
) -> StepOutcome {
    std::thread::sleep(ctx.step_delay);
    let args = match substitute(args, ctx.env.vars()) {
        Ok(a) => a,
        Err(missing) => {
            for name in missing {
                println!(
                    "{}: Expected environment variable did not exist: {name}",
                    step.path
                );
            }
            return StepOutcome::MissingEnv;
        }
    };
    let copy_dir = ctx.args.copy_dir.trim_end_matches('/').to_string();
    let step_root = format!("{copy_dir}/skyhook_dir");
    // §4.3 with Q8: the container environment verbatim, then the step's own variables, then
    // the reserved two.
    let mut env = ctx.env.vars().clone();
    env.extend(injected.iter().cloned());
    if ctx.runner.no_chroot {
        // No chroot: scripts see the sandbox copy, not the (non-existent) host path.
        let host = |p: &str| ctx.layout.host(p).display().to_string();
        env.insert("SKYHOOK_DIR".into(), host(&copy_dir));
        env.insert("STEP_ROOT".into(), host(&step_root));
        env.insert(HOST_ROOT_EXPORT.into(), ctx.layout.root_mount.clone());
    } else {
        env.insert("SKYHOOK_DIR".into(), copy_dir.clone());
        env.insert("STEP_ROOT".into(), step_root.clone());
    }
    let logs = ctx.env.write_logs().then(|| {
        let prefix =
            ctx.layout
                .step_log_prefix(&config.package_name, &config.package_version, &step.path);
        let base = format!("{}-{}.log", prefix.display(), utc_log_stamp());
        (prefix, base)
    });
    let err_log = logs
        .as_ref()
        .map(|(_, base)| std::path::PathBuf::from(format!("{base}.err")));
    let inv = Invocation {
        program: format!("{step_root}/{}", step.path),
        args,
        env,
        cwd: copy_dir,
        chmod: true,
        logs: logs
            .as_ref()
            .zip(err_log.as_ref())
            .map(|((_, base), err)| (base.into(), err.clone())),
        echo: None,
    };
    let outcome = match ctx.runner.run(&inv) {
        Ok(status) => {
            if !step.returncodes.contains(&i64::from(status))
                && let Some(err_log) = &err_log
            {
                append_err_log(
                    err_log,
                    &failure_line(&inv.program, &inv.args, status, &step.returncodes),
                );
            }
            StepOutcome::Exited(status)
        }
        Err(e) => {
            let line = format!("ERROR: step {} could not run: {e}", step.path);
            eprintln!("{line}");
            if let Some(err_log) = &err_log {
                append_err_log(err_log, &line);
            }
            StepOutcome::NotStarted
        }
    };
    if let Some((prefix, _)) = logs
        && let Err(e) = reap_logs(&prefix)
    {
        println!("WARNING: could not reap old logs of {}: {e}", step.path);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_argument_is_replaced_by_its_value() {
        let env: BTreeMap<String, String> = [("FOO".to_string(), "bar".to_string())].into();
        assert_eq!(
            substitute(&["env:FOO".into(), "x".into()], &env).unwrap(),
            ["bar", "x"]
        );
    }

    #[test]
    fn two_missing_env_variables_are_both_reported() {
        let env = BTreeMap::new();
        let missing = substitute(&["env:A".into(), "env:B".into()], &env).unwrap_err();
        assert_eq!(missing, ["A", "B"]);
    }

    #[test]
    fn a_failed_step_is_reported_as_upstreams_helper_reports_it() {
        let args = vec!["a b".to_string()];
        assert_eq!(
            failure_line("/c/skyhook_dir/apply.sh", &args, 2, &[0]),
            "Command '['/c/skyhook_dir/apply.sh', 'a b']' returned non-zero exit status 2."
        );
        assert_eq!(
            failure_line("/c/x.sh", &[], -9, &[0]),
            "Command '['/c/x.sh']' died with signal 9."
        );
        assert!(failure_line("/c/x.sh", &[], 0, &[1]).contains("not in returncodes [1]"));
    }

    #[test]
    fn env_name_stops_at_a_second_env_prefix() {
        assert_eq!(env_arg_name("env:Aenv:B"), Some("A"));
        assert_eq!(env_arg_name("plain"), None);
    }
}
