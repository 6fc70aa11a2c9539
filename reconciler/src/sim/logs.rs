//! Container logs of simulated pods: what `kubectl logs` (the `pods/log` subresource) reads.
//!
//! Each container of a pod keeps the output of its current instance and of the previous one
//! (an in-place restart of `restartPolicy: OnFailure` moves current to previous, as the kubelet
//! keeps one dead instance for `--previous`). Output is bounded per instance
//! ([`LOG_CAP_BYTES`], oldest lines dropped first) so large fleets stay small in memory, and it
//! goes away with the pod, as on a node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::{Key, SimCluster};
use crate::cluster::{ClusterError, LogRequest};

/// Most bytes kept per container instance (the tail is kept).
pub const LOG_CAP_BYTES: usize = 32 * 1024;

/// The output of one container instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceLog {
    /// The kept tail of the output.
    text: String,
    /// Bytes ever written to this instance (offsets for followers survive the cap).
    written: u64,
}

impl InstanceLog {
    fn append(&mut self, text: &str) {
        self.text.push_str(text);
        self.written += text.len() as u64;
        if self.text.len() > LOG_CAP_BYTES {
            let mut cut = self.text.len() - LOG_CAP_BYTES;
            // Drop whole lines where possible, never split a character.
            if let Some(nl) = self.text[cut..].find('\n') {
                cut += nl + 1;
            }
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
        }
    }

    /// Output written after byte `offset` of the instance (as much as is still kept), and the
    /// offset to continue from.
    pub fn since(&self, offset: u64) -> (&str, u64) {
        let start = self.written - self.text.len() as u64;
        let from = usize::try_from(offset.saturating_sub(start)).unwrap_or(usize::MAX);
        let mut from = from.min(self.text.len());
        while !self.text.is_char_boundary(from) {
            from += 1;
        }
        (&self.text[from..], self.written)
    }
}

/// A container's log: its current instance and the one before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerLog {
    current: Option<InstanceLog>,
    previous: Option<InstanceLog>,
}

impl ContainerLog {
    /// A new instance of the container starts (the first run, or a restart in place).
    pub fn start(&mut self) {
        if let Some(current) = self.current.take() {
            self.previous = Some(current);
        }
        self.current = Some(InstanceLog::default());
    }

    /// Appends output to the current instance.
    pub fn append(&mut self, text: &str) {
        if !text.is_empty() {
            self.current
                .get_or_insert_with(Default::default)
                .append(text);
        }
    }

    /// The current instance, once one started.
    pub fn current(&self) -> Option<&InstanceLog> {
        self.current.as_ref()
    }
}

/// The last `lines` lines of `text` (all when `None` or negative).
pub fn tail_lines(text: &str, lines: Option<i64>) -> &str {
    let Some(n) = lines.filter(|n| *n >= 0) else {
        return text;
    };
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n == 0 {
        return "";
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

/// The first `limit` bytes of `text` (on a character boundary), as `limitBytes` does.
pub fn limit_bytes(text: &str, limit: Option<i64>) -> &str {
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return text;
    };
    let mut end = usize::try_from(limit).unwrap_or(usize::MAX).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let st = pod.status.as_ref();
    st.and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .chain(
            st.and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten(),
        )
}

fn bad_request(pod: &str, message: String) -> ClusterError {
    ClusterError::Api {
        action: format!("read log of pod {pod}"),
        status: 400,
        message,
    }
}

impl SimCluster {
    /// Starts a new instance of a container's log (the kubelet starts the container).
    pub(super) fn log_start(&mut self, key: &Key, container: &str) {
        if let Some(rt) = self.pod_rt.get_mut(key) {
            rt.logs.entry(container.to_string()).or_default().start();
        }
    }

    /// Appends output to a container's current instance.
    pub(super) fn log_append(&mut self, key: &Key, container: &str, text: &str) {
        if let Some(rt) = self.pod_rt.get_mut(key) {
            rt.logs
                .entry(container.to_string())
                .or_default()
                .append(text);
        }
    }

    /// Resolves the container a log request names (the only main container when none is
    /// named, as the apiserver does) and checks it has started.
    fn log_of(
        &self,
        req: &LogRequest,
    ) -> Result<(&Pod, String, Option<&ContainerLog>), ClusterError> {
        let key: Key = (req.namespace.clone(), req.pod.clone());
        let Some(pod) = self.pods.get(&key) else {
            return Err(ClusterError::Api {
                action: format!("read log of pod {}/{}", req.namespace, req.pod),
                status: 404,
                message: format!("pods \"{}\" not found", req.pod),
            });
        };
        // An ended pod's containers are archived with its spec.
        let spec = self
            .whole_pod(&key)
            .and_then(|p| p.spec.clone())
            .unwrap_or_default();
        let mains: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
        let inits: Vec<String> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect();
        let container = match (&req.container, mains.as_slice()) {
            (Some(c), _) => c.clone(),
            (None, [only]) => only.clone(),
            (None, _) => {
                return Err(bad_request(
                    &req.pod,
                    format!(
                        "a container name must be specified for pod {}, choose one of: [{}] or one of the init containers: [{}]",
                        req.pod,
                        mains.join(" "),
                        inits.join(" ")
                    ),
                ));
            }
        };
        if !mains.contains(&container) && !inits.contains(&container) {
            return Err(bad_request(
                &req.pod,
                format!("container {container} is not valid for pod {}", req.pod),
            ));
        }
        let log = self.pod_rt.get(&key).and_then(|rt| rt.logs.get(&container));
        Ok((pod, container, log))
    }

    /// What the `pods/log` subresource answers: the container's current output (or the
    /// previous instance's), then `tailLines`, then `limitBytes`.
    pub fn pod_logs(&self, req: &LogRequest) -> Result<String, ClusterError> {
        let (pod, container, log) = self.log_of(req)?;
        let instance = if req.previous {
            match log.and_then(|l| l.previous.as_ref()) {
                Some(p) => p,
                None => {
                    return Err(bad_request(
                        &req.pod,
                        format!(
                            "previous terminated container \"{container}\" in pod \"{}\" not found",
                            req.pod
                        ),
                    ));
                }
            }
        } else {
            match log.and_then(|l| l.current.as_ref()) {
                Some(c) => c,
                None => {
                    let waiting = statuses(pod)
                        .find(|c| c.name == container)
                        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                        .unwrap_or_else(|| "ContainerCreating".into());
                    return Err(bad_request(
                        &req.pod,
                        format!(
                            "container \"{container}\" in pod \"{}\" is waiting to start: {waiting}",
                            req.pod
                        ),
                    ));
                }
            }
        };
        let tailed = tail_lines(&instance.text, req.tail_lines);
        Ok(limit_bytes(tailed, req.limit_bytes).to_string())
    }

    /// One step of a follower (`follow=true`): the output written after `offset` to the
    /// container's current instance, the offset to continue from, and whether the follower
    /// should keep waiting (the instance is still running).
    pub fn pod_logs_since(
        &self,
        req: &LogRequest,
        offset: u64,
    ) -> Result<(String, u64, bool), ClusterError> {
        let (pod, container, log) = self.log_of(req)?;
        let running = pod.metadata.deletion_timestamp.is_none()
            && statuses(pod)
                .find(|c| c.name == container)
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.running.is_some());
        match log.and_then(|l| l.current.as_ref()) {
            Some(instance) => {
                let (text, next) = instance.since(offset);
                Ok((text.to_string(), next, running))
            }
            // Not started yet: a follower waits for it (the apiserver would refuse; the
            // caller decides whether to wait).
            None => Ok((String::new(), offset, true)),
        }
    }
}

/// Container logs kept by a pod's runtime state, by container name.
pub(super) type PodLogs = BTreeMap<String, ContainerLog>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_and_limit_behave_like_the_log_subresource() {
        let text = "a\nb\nc\n";
        assert_eq!(tail_lines(text, Some(2)), "b\nc\n");
        assert_eq!(tail_lines(text, Some(5)), text);
        assert_eq!(tail_lines(text, Some(0)), "");
        assert_eq!(tail_lines(text, Some(-1)), text);
        assert_eq!(tail_lines("a\nb", Some(1)), "b");
        assert_eq!(limit_bytes("héllo", Some(2)), "h");
        assert_eq!(limit_bytes("hello", None), "hello");
    }

    #[test]
    fn instances_are_capped_keeping_the_tail_and_followers_keep_their_place() {
        let mut log = ContainerLog::default();
        log.start();
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..1000 {
            log.append(&line);
        }
        let current = log.current().unwrap();
        assert!(current.text.len() <= LOG_CAP_BYTES);
        assert!(current.text.starts_with('x') && current.text.ends_with('\n'));
        let (_, offset) = current.since(0);
        assert_eq!(offset, 100_000);
        log.append("last\n");
        assert_eq!(log.current().unwrap().since(offset).0, "last\n");
        log.start();
        assert_eq!(log.current().unwrap().since(0).0, "");
        assert!(log.previous.as_ref().unwrap().text.ends_with("last\n"));
    }
}
