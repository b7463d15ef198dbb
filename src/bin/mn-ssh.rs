//! `mn-ssh`: the same program as `multinode ssh`, as its own executable so that
//! mpirun's `plm_rsh_agent` and MPICH's `-launcher-exec` can name one path.
fn main() {
    std::process::exit(multinode::run_personality(
        multinode::Personality::Ssh,
        std::env::args_os().collect(),
    ));
}
