//! `mn-exec-all`: the same program as `multinode exec-all`.
fn main() {
    std::process::exit(multinode::run_personality(
        multinode::Personality::ExecAll,
        std::env::args_os().collect(),
    ));
}
