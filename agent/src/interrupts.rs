//! Interrupt payloads, their commands and per-command flags (§11.1–§11.4).

use std::path::Path;

use crate::env::{HOST_ROOT_EXPORT, ResourceId};
use crate::exec::Invocation;
use crate::pyrepr::repr_str_list;
use crate::timefmt::utc_log_stamp;
use crate::{Context, io_err};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

/// Agent interrupt type names, in upstream's order.
pub const TYPES: [&str; 5] = [
    "node_restart",
    "service_restart",
    "restart_all_services",
    "no_op",
    "script_interrupt",
];

/// A payload could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not base64.
    #[error("interrupt payload is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Not a JSON object.
    #[error("interrupt payload is not a JSON object: {0}")]
    Json(String),
    /// No `type`.
    #[error("interrupt payload has no \"type\"")]
    MissingType,
    /// Unknown `type`.
    #[error("unknown interrupt type {0:?}; known types: {known}", known = TYPES.join(", "))]
    UnknownType(String),
    /// `service_restart` without a `services` list of strings.
    #[error("service_restart requires \"services\", a list of strings")]
    MissingServices,
    /// A key the type does not take.
    #[error("unexpected key {key:?} for interrupt type {kind}")]
    UnexpectedKey {
        /// Interrupt type.
        kind: String,
        /// Key.
        key: String,
    },
}

/// An interrupt as the agent receives it (§2.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupt {
    /// `reboot`.
    NodeRestart,
    /// `systemctl daemon-reload` then `systemctl restart <s>` per service.
    ServiceRestart(Vec<String>),
    /// `service procps force-reload`.
    RestartAllServices,
    /// Nothing but `no_op.complete`.
    NoOp,
    /// Nothing at all (never sent by the operator).
    ScriptInterrupt,
}

impl Interrupt {
    /// The agent type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::NodeRestart => "node_restart",
            Self::ServiceRestart(_) => "service_restart",
            Self::RestartAllServices => "restart_all_services",
            Self::NoOp => "no_op",
            Self::ScriptInterrupt => "script_interrupt",
        }
    }

    /// The commands, in order (§11.1).
    pub fn commands(&self) -> Vec<Vec<String>> {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match self {
            Self::NodeRestart => vec![v(&["reboot"])],
            Self::ServiceRestart(services) => {
                let mut c = vec![v(&["systemctl", "daemon-reload"])];
                c.extend(
                    services
                        .iter()
                        .map(|s| vec!["systemctl".into(), "restart".into(), s.clone()]),
                );
                c
            }
            Self::RestartAllServices => vec![v(&["service", "procps", "force-reload"])],
            Self::NoOp | Self::ScriptInterrupt => vec![],
        }
    }

    /// Decodes a base64 JSON payload.
    pub fn decode(payload: &str) -> Result<Self, Error> {
        let bytes = STANDARD.decode(payload.trim())?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Json(e.to_string()))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::Json("not an object".into()))?;
        let kind = obj
            .get("type")
            .and_then(Value::as_str)
            .ok_or(Error::MissingType)?;
        let allowed: &[&str] = if kind == "service_restart" {
            &["type", "services"]
        } else {
            &["type"]
        };
        if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str()))
            && TYPES.contains(&kind)
        {
            return Err(Error::UnexpectedKey {
                kind: kind.to_string(),
                key: k.clone(),
            });
        }
        Ok(match kind {
            "node_restart" => Self::NodeRestart,
            "service_restart" => {
                let list = obj
                    .get("services")
                    .and_then(Value::as_array)
                    .ok_or(Error::MissingServices)?;
                let services = list
                    .iter()
                    .map(|s| s.as_str().map(str::to_string).ok_or(Error::MissingServices))
                    .collect::<Result<Vec<_>, _>>()?;
                Self::ServiceRestart(services)
            }
            "restart_all_services" => Self::RestartAllServices,
            "no_op" => Self::NoOp,
            "script_interrupt" => Self::ScriptInterrupt,
            other => return Err(Error::UnknownType(other.to_string())),
        })
    }

    /// Encodes as the operator does.
    pub fn encode(&self) -> String {
        let mut m = Map::new();
        m.insert("type".into(), self.type_name().into());
        if let Self::ServiceRestart(s) = self {
            m.insert("services".into(), s.clone().into());
        }
        STANDARD.encode(Value::Object(m).to_string())
    }
}

/// Writes an interrupt flag: epoch seconds with fraction.
pub fn write_flag(path: &Path) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, crate::timefmt::epoch_seconds())
}

/// Environment of interrupt commands: the agent environment (§4.3 levels 1–2), plus the root
/// mount in sandbox mode.
pub(crate) fn command_env(ctx: &Context) -> std::collections::BTreeMap<String, String> {
    let mut env = ctx.env.vars().clone();
    if ctx.runner.no_chroot {
        env.insert(HOST_ROOT_EXPORT.into(), ctx.layout.root_mount.clone());
    }
    env
}

/// Builds the invocation of interrupt command `name` (`<type>_<i>`), logged under the resource
/// id's package and version (§11.4).
pub(crate) fn invocation(
    ctx: &Context,
    rid: &ResourceId,
    name: &str,
    cmd: &[String],
) -> Invocation {
    let prefix = ctx
        .layout
        .interrupt_log_prefix(&rid.package, &rid.version, name);
    let base = format!("{}-{}.log", prefix.display(), utc_log_stamp());
    Invocation {
        // Every command of `Interrupt::commands` has a program; an empty one would fail to spawn.
        program: cmd.first().cloned().unwrap_or_default(),
        args: cmd.iter().skip(1).cloned().collect(),
        env: command_env(ctx),
        cwd: ctx.args.copy_dir.clone(),
        chmod: false,
        logs: Some((base.clone().into(), format!("{base}.err").into())),
        echo: Some(cmd.join(" ")),
    }
}

/// Runs interrupt mode (§11); returns the exit code.
pub fn run(ctx: &Context) -> crate::Result<i32> {
    let id = ctx.env.resource_id();
    let rid = ResourceId::parse(id).ok_or_else(|| crate::Error::ResourceId(id.to_string()))?;
    let payload = ctx
        .args
        .payload
        .as_deref()
        .ok_or(crate::Error::MissingPayload)?;
    let interrupt = Interrupt::decode(payload)?;
    let dir = ctx.layout.interrupt_flags(id);
    std::fs::create_dir_all(&dir).map_err(io_err("cannot create", &dir))?;
    let kind = interrupt.type_name();
    match interrupt {
        Interrupt::NoOp => {
            let f = dir.join("no_op.complete");
            write_flag(&f).map_err(io_err("cannot write", &f))?;
            return Ok(0);
        }
        Interrupt::ScriptInterrupt => return Ok(0),
        Interrupt::NodeRestart => return crate::reboot::run(ctx, &rid, &dir),
        _ => {}
    }
    for (i, cmd) in interrupt.commands().iter().enumerate() {
        let name = format!("{kind}_{i}");
        let flag = dir.join(format!("{name}.complete"));
        if flag.exists() {
            println!("Skipping interrupt {name} because it was already run for {id}");
            continue;
        }
        write_flag(&flag).map_err(io_err("cannot write", &flag))?;
        let status = match ctx.runner.run(&invocation(ctx, &rid, &name, cmd)) {
            Ok(s) => s,
            // Like upstream, a command that cannot start counts as status 1; the error itself
            // is one `ERROR:` line on stderr (docs/agent.md).
            Err(e) => {
                eprintln!("ERROR: interrupt {name} could not run: {e}");
                1
            }
        };
        if status != 0 {
            println!(
                "INTERRUPT FAILED: {} return_code: {status}",
                repr_str_list(cmd)
            );
            std::fs::remove_file(&flag).map_err(io_err("cannot remove", &flag))?;
            return Ok(1);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_map_contains_node_restart_and_service_restart() {
        assert!(TYPES.contains(&"node_restart") && TYPES.contains(&"service_restart"));
    }

    #[test]
    fn reboot_type_name_is_node_restart() {
        assert_eq!(
            Interrupt::decode("eyJ0eXBlIjogIm5vZGVfcmVzdGFydCJ9")
                .unwrap()
                .type_name(),
            "node_restart"
        );
    }

    #[test]
    fn reboot_instance_type_name_is_node_restart() {
        assert_eq!(Interrupt::NodeRestart.type_name(), "node_restart");
    }

    #[test]
    fn reboot_commands_are_exactly_reboot() {
        assert_eq!(
            Interrupt::NodeRestart.commands(),
            vec![vec!["reboot".to_string()]]
        );
    }

    #[test]
    fn service_restart_commands_reload_then_restart_each() {
        let c = Interrupt::ServiceRestart(vec!["foo".into(), "bar".into()]).commands();
        let joined: Vec<String> = c.iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            joined,
            [
                "systemctl daemon-reload",
                "systemctl restart foo",
                "systemctl restart bar"
            ]
        );
    }

    #[test]
    fn every_type_round_trips_through_base64_json() {
        for i in [
            Interrupt::NodeRestart,
            Interrupt::ServiceRestart(vec!["containerd".into()]),
            Interrupt::RestartAllServices,
            Interrupt::NoOp,
            Interrupt::ScriptInterrupt,
        ] {
            assert_eq!(Interrupt::decode(&i.encode()).unwrap(), i);
        }
    }

    #[test]
    fn bad_payloads_are_rejected() {
        let enc = |s: &str| STANDARD.encode(s);
        assert!(matches!(Interrupt::decode("%%%"), Err(Error::Base64(_))));
        assert!(matches!(
            Interrupt::decode(&enc("{}")),
            Err(Error::MissingType)
        ));
        assert!(matches!(
            Interrupt::decode(&enc(r#"{"type":"x"}"#)),
            Err(Error::UnknownType(_))
        ));
        assert!(matches!(
            Interrupt::decode(&enc(r#"{"type":"service_restart"}"#)),
            Err(Error::MissingServices)
        ));
        assert!(matches!(
            Interrupt::decode(&enc(r#"{"type":"no_op","services":[]}"#)),
            Err(Error::UnexpectedKey { .. })
        ));
    }
}
