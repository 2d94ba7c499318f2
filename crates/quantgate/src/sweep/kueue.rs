//! `quantgate sweep submit DIR --kueue QUEUE --image REF@sha256:…`: the plan as Kubernetes
//! objects for a Kueue `LocalQueue`, built as typed `k8s-openapi` (API 1.37) objects and
//! written as JSON (which `kubectl apply -f` and `kubernetes-validate` read):
//!
//! - `pvc.json`: the sweep folder's PersistentVolumeClaim (ReadWriteMany: every pod of the Job
//!   reads and writes it), sized from the plan's disk needs and the inputs;
//! - `job.json`: an Indexed Job, completion index = task index, `suspend: true` and the
//!   `kueue.x-k8s.io/queue-name` label (Kueue admits and unsuspends it), requests and limits
//!   from the plan (one pod template: the largest task's), `backoffLimitPerIndex: 1` and a
//!   `podFailurePolicy` that maps the exit codes as the Slurm script does: 1 and 2 →
//!   `FailIndex` (final), 3 → `Count` (retried once), a `DisruptionTarget` condition
//!   (preemption, eviction) → `Ignore`; the verdict line as the termination message;
//! - `collect-job.json`: a Job on the same queue running `sweep collect --wait`;
//! - `network-policy.json`: no ingress or egress for the sweep's pods.
//!
//! A Job cannot order its indices, so each pod waits for its dependencies' receipts on the
//! volume (`sweep task --wait-deps`). A live Kueue admission could not be tested here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
    PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SecurityContext, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::plan::Plan;

/// Kueue's queue label (kueue.x-k8s.io/v1beta1).
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Where the sweep folder is mounted in every pod.
pub const MOUNT: &str = "/sweep";
/// The image's non-root user (Containerfile).
pub const USER_ID: i64 = 10001;
/// How long a pod waits for its dependencies, seconds (a week).
pub const WAIT_DEPS_S: u64 = 7 * 24 * 3600;

/// What `submit --kueue` needs besides the plan.
#[derive(Clone, Debug)]
pub struct KueueOptions {
    pub queue: String,
    /// `NAME@sha256:…`: pulled by its registry (manifest) digest.
    pub image: String,
    /// The image ID (config digest, `sha256:…`) that reports name: it survives a push, while
    /// the manifest digest changes when a registry recompresses layers (docs/image.md).
    pub image_id: String,
    /// Pods at once (default: every task).
    pub parallelism: Option<i32>,
    /// StorageClass of the volume (the cluster's default when absent).
    pub storage_class: Option<String>,
}

/// The four objects.
#[derive(Clone, Debug)]
pub struct Manifests {
    pub pvc: PersistentVolumeClaim,
    pub job: Job,
    pub collect: Job,
    pub network_policy: NetworkPolicy,
}

/// The digest part of `REF@sha256:…`.
///
/// Errors: no `@sha256:` digest (an image by tag is not pinned).
pub fn image_digest(image: &str) -> Result<String> {
    match image.rsplit_once('@') {
        Some((_, d)) if crate::image::is_digest(d) => Ok(d.to_string()),
        _ => bail!("--image {image:?}: name the image by digest (NAME@sha256:<64 hex>); a tag is not pinned"),
    }
}

fn qty(s: String) -> Quantity {
    Quantity(s)
}

fn labels(plan: &Plan, queue: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (QUEUE_LABEL.to_string(), queue.to_string()),
        ("app.kubernetes.io/name".into(), "quantgate".into()),
        ("quantgate.io/sweep".into(), plan.sweep_id.clone()),
    ])
}

fn meta(name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: Some(labels),
        ..Default::default()
    }
}

/// The one container of a sweep pod running `args` after `quantgate`.
fn container(plan: &Plan, o: &KueueOptions, name: &str, args: Vec<String>) -> Container {
    let digest = o.image_id.as_str();
    let (cpus, mem) = plan.largest_needs();
    let res = BTreeMap::from([
        ("cpu".to_string(), qty(cpus.to_string())),
        ("memory".to_string(), qty(format!("{mem}Mi"))),
    ]);
    let env = |n: &str, v: &str| EnvVar {
        name: n.into(),
        value: Some(v.into()),
        ..Default::default()
    };
    Container {
        name: name.into(),
        image: Some(o.image.clone()),
        command: Some(
            std::iter::once("quantgate".to_string())
                .chain(args)
                .collect(),
        ),
        env: Some(vec![
            env(crate::image::ENV, digest),
            env(llama_runtime::CPU_VARIANT_ENV, &plan.settings.cpu_variant),
            env("TMPDIR", "/tmp"),
            EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(res.clone()),
            limits: Some(res),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "sweep".into(),
                mount_path: MOUNT.into(),
                ..Default::default()
            },
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..Default::default()
            },
        ]),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(USER_ID),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(plan: &Plan, o: &KueueOptions, c: Container, pvc: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(plan, &o.queue)),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(USER_ID),
                fs_group: Some(USER_ID),
                ..Default::default()
            }),
            containers: vec![c],
            volumes: Some(vec![
                Volume {
                    name: "sweep".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: pvc.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
    }
}

fn exit_rule(action: &str, codes: Vec<i32>) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
            container_name: Some("task".into()),
            operator: "In".into(),
            values: codes,
        }),
        ..Default::default()
    }
}

/// The objects for `plan` (see the module doc).
///
/// Errors: the image is not named by digest; an empty plan.
pub fn manifests(plan: &Plan, o: &KueueOptions, inputs_bytes: u64) -> Result<Manifests> {
    image_digest(&o.image)?;
    // A label value: at most 63 characters, alphanumeric at both ends, `-_.` inside.
    let q = o.queue.as_bytes();
    let label_ok = !q.is_empty()
        && q.len() <= 63
        && q.first().is_some_and(u8::is_ascii_alphanumeric)
        && q.last().is_some_and(u8::is_ascii_alphanumeric)
        && q.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c));
    if !label_ok {
        bail!(
            "--kueue {:?}: not a valid queue name (a Kubernetes label value)",
            o.queue
        );
    }
    if !crate::image::is_digest(&o.image_id) {
        bail!("--image-id {:?}: not an image ID (sha256: and 64 lowercase hex digits; scripts/build-image.sh prints it)", o.image_id);
    }
    let n = i32::try_from(plan.tasks.len())?;
    if n == 0 {
        bail!("the plan has no tasks");
    }
    let name = format!("qg-{}", plan.sweep_id.to_ascii_lowercase());
    let pvc_name = format!("{name}-sweep");
    let disk: u64 = plan.tasks.iter().map(|t| t.needs.disk_bytes).sum::<u64>() + inputs_bytes;
    let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let wait = WAIT_DEPS_S.to_string();
    let task_args = strings(&[
        "sweep",
        "task",
        MOUNT,
        "--index-env",
        "JOB_COMPLETION_INDEX",
        "--executor",
        "kueue",
        "--job-env",
        "POD_NAME",
        "--termination-log",
        "/dev/termination-log",
        "--wait-deps",
        &wait,
    ]);
    let task_pod = pod(plan, o, container(plan, o, "task", task_args), &pvc_name);
    let collect_args = strings(&["sweep", "collect", MOUNT, "--wait", &wait]);
    let collect_pod = pod(
        plan,
        o,
        container(plan, o, "collect", collect_args),
        &pvc_name,
    );
    Ok(Manifests {
        pvc: pvc(plan, o, &pvc_name, disk),
        job: task_job(plan, o, &name, n, task_pod),
        collect: Job {
            metadata: meta(format!("{name}-collect"), labels(plan, &o.queue)),
            spec: Some(JobSpec {
                suspend: Some(true),
                completions: Some(1),
                parallelism: Some(1),
                backoff_limit: Some(1),
                template: collect_pod,
                ..Default::default()
            }),
            ..Default::default()
        },
        network_policy: network_policy(plan, &name),
    })
}

fn sweep_label(plan: &Plan) -> BTreeMap<String, String> {
    BTreeMap::from([("quantgate.io/sweep".into(), plan.sweep_id.clone())])
}

/// The sweep folder's volume: `disk` bytes, ReadWriteMany.
fn pvc(plan: &Plan, o: &KueueOptions, name: &str, disk: u64) -> PersistentVolumeClaim {
    let storage = qty(format!("{}Mi", disk.div_ceil(1 << 20)));
    PersistentVolumeClaim {
        metadata: meta(name.into(), sweep_label(plan)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteMany".into()]),
            storage_class_name: o.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), storage)])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Indexed Job of the `n` tasks, suspended for Kueue, with the exit-code policy.
fn task_job(plan: &Plan, o: &KueueOptions, name: &str, n: i32, template: PodTemplateSpec) -> Job {
    Job {
        metadata: meta(name.into(), labels(plan, &o.queue)),
        spec: Some(JobSpec {
            suspend: Some(true),
            completion_mode: Some("Indexed".into()),
            completions: Some(n),
            parallelism: Some(o.parallelism.unwrap_or(n).clamp(1, n)),
            backoff_limit_per_index: Some(1),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![
                    exit_rule("FailIndex", vec![1, 2]),
                    exit_rule("Count", vec![3]),
                    PodFailurePolicyRule {
                        action: "Ignore".into(),
                        on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                            type_: "DisruptionTarget".into(),
                            status: Some("True".into()),
                        }]),
                        ..Default::default()
                    },
                ],
            }),
            template,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// No ingress and no egress for the sweep's pods.
fn network_policy(plan: &Plan, name: &str) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(format!("{name}-no-network"), sweep_label(plan)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(sweep_label(plan)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..Default::default()
        }),
    }
}

/// Writes the manifests into `DIR/kueue/` (each file atomically); their paths, in the order
/// `kubectl apply` takes them.
pub fn write(dir: &Path, m: &Manifests) -> Result<Vec<PathBuf>> {
    let out = dir.join("kueue");
    let files: [(&str, serde_json::Value); 4] = [
        ("pvc.json", serde_json::to_value(&m.pvc)?),
        (
            "network-policy.json",
            serde_json::to_value(&m.network_policy)?,
        ),
        ("job.json", serde_json::to_value(&m.job)?),
        ("collect-job.json", serde_json::to_value(&m.collect)?),
    ];
    let mut paths = Vec::new();
    for (name, v) in files {
        let p = out.join(name);
        crate::paths::write_atomic(&p, &serde_json::to_vec_pretty(&v)?)?;
        paths.push(p);
    }
    Ok(paths)
}

/// Applies the manifests with `kubectl apply -f` when `kubectl` and a current context are
/// present; `Ok(false)` when they are not (the manifests stay written).
///
/// Errors: kubectl refusing them.
pub fn apply(paths: &[PathBuf]) -> Result<bool> {
    use std::process::Command;
    use std::time::Duration;
    let ctx = super::slurm::run_limited(
        Command::new("kubectl").args(["config", "current-context"]),
        Duration::from_secs(20),
    );
    match ctx {
        Ok(o) if o.status.success() => {}
        _ => return Ok(false),
    }
    for p in paths {
        let o = super::slurm::run_limited(
            Command::new("kubectl").arg("apply").arg("-f").arg(p),
            Duration::from_secs(120),
        )?;
        if !o.status.success() {
            bail!(
                "kubectl apply -f {}: {}",
                p.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
    }
    Ok(true)
}
