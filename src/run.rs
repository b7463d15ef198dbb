//! The front door: which personality was called, clap parsing, logging, the
//! runtime, and turning an outcome into an exit code (the only place that does).

use std::ffi::OsString;
use std::path::Path;

use clap::Parser;

use crate::cli::{Cli, Command, ExecAllArgs};
use crate::error::Error;
use crate::exit_code;

/// Which program the user called: `multinode`, or one of its aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Personality {
    Multinode,
    Ssh,
    ExecAll,
}

impl Personality {
    fn from_argv0(argv0: Option<&OsString>) -> Self {
        let name = argv0
            .and_then(|a| Path::new(a).file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("multinode");
        match name {
            "mn-ssh" => Personality::Ssh,
            "mn-exec-all" => Personality::ExecAll,
            _ => Personality::Multinode,
        }
    }

    fn program(self) -> &'static str {
        match self {
            Personality::Multinode => "multinode",
            Personality::Ssh => "mn-ssh",
            Personality::ExecAll => "mn-exec-all",
        }
    }
}

/// Runs the program named by `args[0]` (multi-call: `mn-ssh`, `mn-exec-all`, `multinode`).
pub fn run_from_args(args: Vec<OsString>) -> i32 {
    let personality = Personality::from_argv0(args.first());
    run_personality(personality, args)
}

/// Runs one personality with the full argv (`args[0]` is the program name).
pub fn run_personality(personality: Personality, args: Vec<OsString>) -> i32 {
    let program = personality.program();
    let outcome = match personality {
        Personality::Ssh => crate::transport::ssh::main(args.into_iter().skip(1).collect()),
        Personality::ExecAll => match ExecAllCli::try_parse_from(args) {
            Ok(cli) => {
                crate::logging::init(cli.verbose);
                crate::exec_all::main(cli.args)
            }
            Err(e) => return clap_error(program, e),
        },
        Personality::Multinode => match Cli::try_parse_from(args) {
            Ok(cli) => {
                crate::logging::init(cli.verbose);
                dispatch(cli.command)
            }
            Err(e) => return clap_error(program, e),
        },
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            crate::stdio::eprint(&format!("{program}: error: {e}\n"));
            e.exit_code()
        }
    }
}

fn dispatch(command: Command) -> Result<i32, Error> {
    match command {
        Command::Env(args) => crate::env::cmd_env(&args),
        Command::Hosts(args) => crate::topology::cmd_hosts(&args),
        Command::Ssh(args) => crate::transport::ssh::main(args.args),
        Command::ExecAll(args) => crate::exec_all::main(args),
        Command::Agent(args) => crate::agent::main(args),
        Command::Keygen(args) => crate::keys::cmd_keygen(&args),
        Command::Demo(args) => crate::demo::main(args),
        Command::Supervise(args) => crate::supervise::main(args),
        Command::KeepGroups(args) => crate::agent::keep_groups(args.grace),
        Command::Check(args) => crate::check::main(args),
        Command::Ps(args) => crate::snapshot::gather::main(args),
    }
}

/// `mn-exec-all` takes the options of `multinode exec-all` directly.
#[derive(Debug, Parser)]
#[command(
    name = "mn-exec-all",
    version,
    about = "Run one script on every node, RANK set per node"
)]
struct ExecAllCli {
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(flatten)]
    args: ExecAllArgs,
}

/// clap's errors, as one line (help and version go to stdout with code 0).
fn clap_error(program: &str, e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit_code::USAGE
            } else {
                exit_code::SUCCESS
            }
        }
        _ => {
            let rendered = e.render().to_string();
            let first = rendered
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            crate::stdio::eprint(&format!(
                "{program}: error: {first} (see {program} --help)\n"
            ));
            exit_code::USAGE
        }
    }
}
