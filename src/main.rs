fn main() {
    std::process::exit(multinode::run_from_args(std::env::args_os().collect()));
}
