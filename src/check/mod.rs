//! `multinode check`: a preflight of every node for the known multi-node
//! pitfalls (docs/check.md lists every check, its thresholds and its fix).
//!
//! The head listens on the rendezvous port and runs `multinode check
//! --local` on every node at once through exec_all's `collect`; each node
//! prints its facts as JSON (and connects to the rendezvous port); the head
//! evaluates them all with one pure function and prints a table or JSON.
//!
//! - `facts`: the report of one node (the JSON of `--local`).
//! - `probe`: the I/O behind the facts, as a trait; the real machine.
//! - `local`: `--local`: the facts of this node, the slow parts at once.
//! - `rendezvous`: the head's listener and its clock line; the node's connection.
//! - `checks`: facts in, one result a check out.
//! - `report`: the table and the JSON.
//! - `head`: `multinode check` on the head.
//! - `gpu_health`: `--local --gpu`: the GPUs' error and link state, the
//!   kernel log's Xid lines.
//! - `gpu_speed`: `--local --gpu`: each GPU's matmul and copy speed, by
//!   `gpu_speed.py` with the job's torch.
//! - `cuda`: pure parsers (nvidia-smi's output is `crate::nvidia_smi`'s;
//!   CUDA versions and architectures, NCCL's and Gloo's lists,
//!   host names folded as `node[01-04]`).

mod checks;
mod cuda;
mod facts;
mod gpu_health;
mod gpu_speed;
mod gpu_stack;
mod head;
mod local;
mod probe;
mod rendezvous;
mod report;

use crate::cli::CheckArgs;
use crate::error::Error;

/// `multinode check [--local]`: the exit code is 0 when every check is ok
/// (warnings allowed unless `--strict`), [`crate::exit_code::CHECK_FAILED`]
/// otherwise; bad input is an [`Error::Usage`].
pub fn main(args: CheckArgs) -> Result<i32, Error> {
    if args.local {
        local::run_local(&args)
    } else {
        head::run_head(&args)
    }
}
