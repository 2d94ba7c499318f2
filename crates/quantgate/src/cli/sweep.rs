//! `quantgate sweep plan|run|status|collect|submit|task`: sweeps on this machine, Slurm or
//! Kueue (see [`quantgate::sweep`]).

use std::path::PathBuf;
use std::time::Duration;

use quantgate::sweep::receipt::{Executor, TaskState};
use quantgate::sweep::task::{TaskOptions, TaskOutcome};
use quantgate::sweep::{collect, kueue, local, plan, slurm, status};
use quantgate::verify::Verdict;

use super::exit::usage;
use super::Status;

/// `sweep` subcommands.
#[derive(clap::Subcommand)]
pub enum SweepCommand {
    /// Validate a sweep file, hash its inputs into DIR/inputs and write DIR/plan.json: the tasks
    /// with stable indices, dependencies and needs.
    Plan(PlanArgs),
    /// Run the plan on this machine (resumable: finished tasks are skipped).
    Run(RunArgs),
    /// Each task's standing, from the receipts (and squeue for a Slurm submission).
    Status(DirArgs),
    /// Write DIR/collect/sweep.{json,md,html}: every task's verdict, figures and receipt; GO or
    /// NO-GO last.
    Collect(CollectArgs),
    /// Compare two runs of one plan task by task: state, verdict, quality fields, output hashes.
    Compare(CompareArgs),
    /// Submit the plan to Slurm (an sbatch array) or write (and apply) Kueue manifests.
    Submit(SubmitArgs),
    /// Run one task of the plan (what every executor runs).
    Task(TaskArgs),
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// The sweep file (TOML; see sweeps/ci.toml).
    sweep: PathBuf,
    /// The sweep folder to create (must not exist).
    #[arg(short, long)]
    output: PathBuf,
}

#[derive(clap::Args)]
pub struct RunArgs {
    dir: PathBuf,
    /// Tasks at once.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
}

#[derive(clap::Args)]
pub struct DirArgs {
    dir: PathBuf,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct CollectArgs {
    dir: PathBuf,
    /// Wait up to this many seconds for every task to end first (a collect job started beside
    /// the tasks).
    #[arg(long, value_name = "SECONDS")]
    wait: Option<u64>,
}

#[derive(clap::Args)]
pub struct CompareArgs {
    a: PathBuf,
    b: PathBuf,
}

#[derive(clap::Args)]
pub struct SubmitArgs {
    dir: PathBuf,
    /// Submit an sbatch array to the Slurm controller this machine reaches.
    #[arg(long, conflicts_with = "kueue")]
    slurm: bool,
    /// Slurm partition.
    #[arg(long, requires = "slurm")]
    partition: Option<String>,
    /// Kueue LocalQueue to write the Kubernetes manifests for.
    #[arg(long, value_name = "QUEUE", requires_all = ["image", "image_id"])]
    kueue: Option<String>,
    /// Kueue: the image by its registry digest (NAME@sha256:…).
    #[arg(long, value_name = "REF", requires = "kueue")]
    image: Option<String>,
    /// Kueue: the image ID (sha256:…, scripts/build-image.sh's last line) that reports name.
    #[arg(long, value_name = "ID", requires = "kueue")]
    image_id: Option<String>,
    /// Kueue: pods at once (default every task).
    #[arg(long, requires = "kueue")]
    parallelism: Option<i32>,
    /// Kueue: StorageClass of the sweep volume.
    #[arg(long, requires = "kueue")]
    storage_class: Option<String>,
}

#[derive(clap::Args)]
pub struct TaskArgs {
    dir: PathBuf,
    /// Task index.
    #[arg(long, required_unless_present = "index_env")]
    index: Option<usize>,
    /// Read the index from this environment variable (JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID).
    #[arg(long, value_name = "VAR", conflicts_with = "index")]
    index_env: Option<String>,
    /// local, slurm, kueue or manual.
    #[arg(long, default_value = "manual")]
    executor: Executor,
    /// The scheduler's id of this attempt.
    #[arg(long)]
    job: Option<String>,
    /// Read the job id from this environment variable (POD_NAME).
    #[arg(long, value_name = "VAR", conflicts_with = "job")]
    job_env: Option<String>,
    /// Wait up to this many seconds for dependencies to finish.
    #[arg(long, value_name = "SECONDS")]
    wait_deps: Option<u64>,
    /// Write the verdict line here when done (Kubernetes' termination message).
    #[arg(long, value_name = "PATH")]
    termination_log: Option<PathBuf>,
}

/// `exit 3`, or `killed by a signal`.
fn exit_text(code: Option<i32>) -> String {
    code.map_or("killed by a signal".into(), |c| format!("exit {c}"))
}

/// Dispatches.
pub fn run(c: SweepCommand) -> anyhow::Result<Status> {
    quantgate::interrupt::install();
    match c {
        SweepCommand::Plan(a) => plan_cmd(a),
        SweepCommand::Run(a) => run_cmd(a),
        SweepCommand::Status(a) => status_cmd(a),
        SweepCommand::Collect(a) => collect_cmd(a),
        SweepCommand::Compare(a) => compare_cmd(a),
        SweepCommand::Submit(a) => submit_cmd(a),
        SweepCommand::Task(a) => task_cmd(a),
    }
}

fn plan_cmd(a: PlanArgs) -> anyhow::Result<Status> {
    // Verify's memory estimate counts Q2_K repacks only on AVX-512 variants.
    let avx512 = quantgate::sweep::file::load(&a.sweep)
        .map(|l| {
            [
                "skylakex",
                "icelake",
                "cannonlake",
                "cooperlake",
                "zen4",
                "sapphirerapids",
            ]
            .contains(&l.file.settings.cpu_variant.as_str())
        })
        .unwrap_or(false);
    // Errors keep their kind: a full disk is a runtime failure (exit 3), the rest exit 2.
    let p = plan::write(&a.sweep, &a.output, avx512)?;
    for t in &p.tasks {
        let deps: Vec<String> = t.deps.iter().map(|d| d.to_string()).collect();
        println!(
            "{:>3} {:<28} after [{}] · {} CPUs · {} MiB · {} MiB disk",
            t.index,
            t.id,
            deps.join(","),
            t.needs.cpus,
            t.needs.mem_mib(),
            t.needs.disk_bytes.div_ceil(1 << 20)
        );
    }
    println!(
        "plan: {} tasks → {}",
        p.tasks.len(),
        a.output.join("plan.json").display()
    );
    Ok(Status::Success)
}

fn run_cmd(a: RunArgs) -> anyhow::Result<Status> {
    let s = local::run(&a.dir, a.jobs, &mut |e| match e {
        local::Event::Started { index, id } => eprintln!("sweep: start {index} {id}"),
        local::Event::Finished {
            index,
            receipt,
            exit,
        } => match receipt {
            Some(r) => eprintln!(
                "sweep: end {index} {}: {}{} in {:.1} s",
                r.id,
                status::text(&status::Standing::Ended { how: r.state }),
                r.verdict.map_or(String::new(), |v| format!(" ({v})")),
                r.wall_s
            ),
            None => eprintln!("sweep: end {index}: no receipt ({})", exit_text(exit)),
        },
    })?;
    println!(
        "sweep run: {} ran, {} already final, {} blocked, {} unfinished",
        s.ran.len(),
        s.already_final,
        s.blocked.len(),
        s.unfinished.len()
    );
    for (t, d) in &s.blocked {
        println!("blocked: {t} (dependency {d} did not pass)");
    }
    let rows = status::rows(&a.dir, &Default::default())?;
    let all = rows.iter().all(|r| {
        r.standing
            == status::Standing::Ended {
                how: TaskState::Passed,
            }
    });
    Ok(Status::from_pass(all))
}

fn status_cmd(a: DirArgs) -> anyhow::Result<Status> {
    let sched = slurm::queue(&a.dir).unwrap_or_else(|e| {
        eprintln!("sweep status: squeue: {e:#}");
        Default::default()
    });
    let rows = status::rows(&a.dir, &sched)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(Status::Success);
    }
    for r in &rows {
        let rc = r.receipt.as_ref();
        println!(
            "{:>3} {:<28} {:<24} {}{}",
            r.index,
            r.id,
            status::text(&r.standing),
            rc.map_or(String::new(), |x| format!(
                "attempt {} ({}) ",
                x.attempt,
                x.executor.name()
            )),
            r.scheduler
                .as_deref()
                .map_or(String::new(), |s| format!("scheduler: {s}"))
        );
    }
    let counts: Vec<String> = status::summary(&rows)
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!("{}", counts.join(", "));
    Ok(Status::Success)
}

fn collect_cmd(a: CollectArgs) -> anyhow::Result<Status> {
    let sched = slurm::queue(&a.dir).unwrap_or_default();
    let (c, out) = collect::collect(&a.dir, a.wait.map(Duration::from_secs), &sched)?;
    let counts: Vec<String> = c.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("sweep {}: {}", c.sweep_id, counts.join(", "));
    println!("table: {}/sweep.{{json,md,html}}", out.display());
    println!("{}", c.verdict);
    Ok(Status::from_pass(c.verdict == Verdict::Go))
}

fn compare_cmd(a: CompareArgs) -> anyhow::Result<Status> {
    let d = quantgate::sweep::compare::compare(&a.a, &a.b)?;
    let same = d.iter().filter(|t| t.differences.is_empty()).count();
    for t in d.iter().filter(|t| !t.differences.is_empty()) {
        for x in &t.differences {
            println!("{}: {x}", t.id);
        }
    }
    println!(
        "{same} of {} tasks: same state, verdict and quality fields",
        d.len()
    );
    Ok(Status::from_pass(same == d.len()))
}

fn submit_cmd(a: SubmitArgs) -> anyhow::Result<Status> {
    if a.slurm {
        let s = slurm::submit(&a.dir, a.partition.as_deref())?;
        println!(
            "slurm: array job {} ({}), collect job {}",
            s.array_job, s.script, s.collect_job
        );
        return Ok(Status::Success);
    }
    let (Some(queue), Some(image), Some(image_id)) = (a.kueue, a.image, a.image_id) else {
        return Err(usage(
            "submit needs --slurm, or --kueue QUEUE --image REF@sha256:… --image-id sha256:…",
        ));
    };
    let p = plan::Plan::load(&a.dir)?;
    let inputs: u64 = p
        .inputs
        .iter()
        .filter_map(|i| std::fs::metadata(a.dir.join(&i.path)).ok())
        .map(|m| m.len())
        .sum();
    let o = kueue::KueueOptions {
        queue,
        image,
        image_id,
        parallelism: a.parallelism,
        storage_class: a.storage_class,
    };
    let m = kueue::manifests(&p, &o, inputs).map_err(|e| usage(format!("{e:#}")))?;
    let paths = kueue::write(&a.dir, &m)?;
    for p in &paths {
        println!("manifest: {}", p.display());
    }
    if kueue::apply(&paths)? {
        println!("kueue: applied with kubectl (the Job is suspended until Kueue admits it)");
    } else {
        println!("kueue: no kubectl context here; copy DIR onto the volume, then `kubectl apply -f` each manifest in this order");
    }
    Ok(Status::Success)
}

fn from_env(var: &str) -> anyhow::Result<String> {
    std::env::var(var).map_err(|_| usage(format!("environment variable {var} is not set")))
}

fn task_cmd(a: TaskArgs) -> anyhow::Result<Status> {
    let index = match (a.index, a.index_env) {
        (Some(i), _) => i,
        (None, Some(v)) => from_env(&v)?
            .trim()
            .parse()
            .map_err(|_| usage(format!("{v}: not a task index")))?,
        (None, None) => return Err(usage("--index or --index-env")),
    };
    let job = match (a.job, a.job_env) {
        (Some(j), _) => Some(j),
        (None, Some(v)) => std::env::var(v).ok(),
        _ => None,
    };
    let o = TaskOptions {
        executor: a.executor,
        job,
        wait_deps: a.wait_deps.map(Duration::from_secs),
    };
    let outcome = quantgate::sweep::task::run(&a.dir, index, &o)?;
    let line = match &outcome {
        TaskOutcome::Ran(r) | TaskOutcome::AlreadyFinal(r) => {
            let how = status::text(&status::Standing::Ended { how: r.state });
            if matches!(outcome, TaskOutcome::AlreadyFinal(_)) {
                println!("{}: already {how} (receipt kept)", r.id);
            } else {
                println!(
                    "{}: {how} ({}) in {:.1} s",
                    r.id,
                    exit_text(r.exit_code),
                    r.wall_s
                );
                if let Some(why) = r.reason.as_deref().filter(|w| !w.is_empty()) {
                    println!("reason: {why}");
                }
            }
            r.verdict.map_or(how, |v| v.to_string())
        }
        TaskOutcome::Blocked { dep, state } => {
            let how = status::text(&status::Standing::Ended { how: *state });
            println!("blocked: dependency {dep} ended {how}");
            format!("blocked by {dep}")
        }
    };
    if let Some(p) = &a.termination_log {
        // Best effort: the message is a courtesy to `kubectl describe`; the receipt is the record.
        let _ = std::fs::write(p, format!("{line}\n"));
    }
    println!("{line}");
    Ok(Status::Code(outcome.exit_code()))
}
