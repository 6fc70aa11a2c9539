//! A `batch/v1` Job as this project holds it: k8s-openapi's `Job` with its spec shared.
//!
//! k8s-openapi keeps a Job's spec inline, so every `Job` is 2.6 KB however little of it is
//! set. A rollout keeps tens of thousands of finished Jobs until their TTL, and a finished
//! Job's spec is never read (the stores drop it), so holding it apart makes such a Job its
//! metadata and status alone. The spec is shared rather than boxed because a Job's status
//! changes many times and its spec almost never: a copy of the Job for a status change (the
//! simulated Job controller's, while a snapshot still holds the Job) keeps the same spec. On
//! the wire it is the same object: the same JSON both ways, the same `kube::Resource`.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{JobSpec, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `batch/v1` Job: k8s-openapi's fields, the spec shared.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Job {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The desired behaviour of the Job (a finished Job in the stores has none).
    pub spec: Option<Arc<JobSpec>>,
    /// The Job's current status.
    pub status: Option<JobStatus>,
}

impl k8s_openapi::Resource for Job {
    const API_VERSION: &'static str = "batch/v1";
    const GROUP: &'static str = "batch";
    const KIND: &'static str = "Job";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "jobs";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for Job {
    const LIST_KIND: &'static str = "JobList";
}

impl k8s_openapi::Metadata for Job {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Serialize for Job {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = 3 + usize::from(self.spec.is_some()) + usize::from(self.status.is_some());
        let mut state = serializer.serialize_struct("Job", fields)?;
        state.serialize_field("apiVersion", "batch/v1")?;
        state.serialize_field("kind", "Job")?;
        state.serialize_field("metadata", &self.metadata)?;
        if let Some(spec) = &self.spec {
            state.serialize_field("spec", &**spec)?;
        }
        if let Some(status) = &self.status {
            state.serialize_field("status", status)?;
        }
        state.end()
    }
}

impl<'de> Deserialize<'de> for Job {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The object as sent: `apiVersion` and `kind`, when present, must name a Job.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            #[serde(default)]
            api_version: Option<String>,
            #[serde(default)]
            kind: Option<String>,
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Option<JobSpec>,
            #[serde(default)]
            status: Option<JobStatus>,
        }
        let wire = Wire::deserialize(deserializer)?;
        for (field, got, want) in [
            ("apiVersion", &wire.api_version, "batch/v1"),
            ("kind", &wire.kind, "Job"),
        ] {
            if let Some(got) = got
                && got != want
            {
                return Err(serde::de::Error::custom(format!(
                    "{field} {got:?} where a Job needs {want:?}"
                )));
            }
        }
        Ok(Job {
            metadata: wire.metadata,
            spec: wire.spec.map(Arc::new),
            status: wire.status,
        })
    }
}

impl From<k8s_openapi::api::batch::v1::Job> for Job {
    fn from(job: k8s_openapi::api::batch::v1::Job) -> Self {
        Job {
            metadata: job.metadata,
            spec: job.spec.map(Arc::new),
            status: job.status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn it_reads_and_writes_the_json_of_k8s_openapis_job() {
        let wire = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "apply-n1", "namespace": "nodewright", "labels": {"a": "b"}},
            "spec": {
                "backoffLimit": 3,
                "template": {"spec": {"containers": [{"name": "done", "image": "i"}]}}
            },
            "status": {"active": 1}
        });
        let ours: Job = serde_json::from_value(wire.clone()).unwrap();
        let theirs: k8s_openapi::api::batch::v1::Job =
            serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(ours, Job::from(theirs.clone()));
        assert_eq!(serde_json::to_value(&ours).unwrap(), wire);
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::to_value(&theirs).unwrap()
        );
        let finished = Job { spec: None, ..ours };
        assert_eq!(
            serde_json::to_value(&finished).unwrap(),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "apply-n1", "namespace": "nodewright", "labels": {"a": "b"}},
                   "status": {"active": 1}})
        );
    }

    #[test]
    fn another_kind_is_refused_by_name() {
        let err = serde_json::from_value::<Job>(json!({"apiVersion": "v1", "kind": "Pod"}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("apiVersion \"v1\" where a Job needs \"batch/v1\""),
            "{err}"
        );
    }

    #[test]
    fn a_finished_job_is_a_fraction_of_k8s_openapis() {
        assert!(
            std::mem::size_of::<Job>() * 3
                < std::mem::size_of::<k8s_openapi::api::batch::v1::Job>()
        );
    }
}
