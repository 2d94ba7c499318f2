//! Sweeps: many models × ftypes × tasks (convert, quantize, verify, release, protocol runs),
//! declared once in a sweep file, planned into independent tasks with stable indices,
//! dependencies and needs, and run by the engines people already have: this machine
//! ([`local`]), a Slurm array ([`slurm`]) or a Kueue-queued Indexed Job ([`kueue`]). Every
//! executor runs the same unit, [`task::run`], so a task's verdict and figures do not depend on
//! where it ran; the plan pins the CPU variant and threads that they do depend on.
//!
//! `sweep plan` → `DIR/plan.json` ([`plan`]); `sweep run|submit` → `DIR/tasks/NNN-…/receipt.json`
//! ([`receipt`]); `sweep status` ([`status`]); `sweep collect` → `DIR/collect/sweep.{json,md,html}`
//! ([`collect`]). Example: `sweeps/ci.toml`; docs/sweep.md.

pub mod collect;
pub mod compare;
pub mod figures;
pub mod file;
pub mod kueue;
pub mod local;
pub mod needs;
pub mod plan;
pub mod receipt;
pub mod slurm;
pub mod status;
pub mod task;
