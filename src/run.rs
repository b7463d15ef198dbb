//! The front door: which personality was called, clap parsing, logging, the
//! runtime, and turning an outcome into an exit code (the only place that does).

use std::ffi::OsString;
use std::path::Path;

use clap::Parser;

use crate::cli::{Cli, Command, EnvFormat, ExecAllArgs, TableFormat};
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
                crate::logging::init(program, cli.verbose, false);
                crate::exec_all::main(cli.args)
            }
            Err(e) => return clap_error(program, program.to_string(), e),
        },
        Personality::Multinode => match Cli::try_parse_from(&args) {
            Ok(cli) => {
                let service = matches!(cli.command, Command::Agent(_) | Command::KeepGroups(_));
                crate::logging::init(program, cli.verbose, service);
                dispatch(cli.command)
            }
            Err(e) => return clap_error(program, help_of(&args), e),
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
        Command::Env(args) => {
            crate::env::cmd_env(&args.topology.inputs(), args.format == EnvFormat::Json)
        }
        Command::Hosts(args) => crate::topology::cmd_hosts(
            &args.topology.inputs(),
            !args.no_resolve,
            args.format == TableFormat::Json,
        ),
        Command::Ssh(args) => crate::transport::ssh::main(args.args),
        Command::ExecAll(args) => crate::exec_all::main(*args),
        Command::Agent(args) => crate::agent::main(args),
        Command::Keygen(args) => {
            crate::keys::cmd_keygen(args.secret_file.as_deref(), &args.output, args.known_hosts)
        }
        Command::Demo(args) => crate::demo::main(args),
        Command::Supervise(args) => crate::supervise::main(args),
        Command::KeepGroups(args) => crate::agent::keep_groups(args.grace),
        Command::Check(args) => crate::check::main(args),
        Command::InstallHelper(args) => crate::helper::cmd_install_helper(&args.dir),
        Command::Ps(args) => crate::snapshot::survey::main(args),
        Command::Top(args) => crate::top::main(args),
        Command::Shell(args) => crate::shell::main(args),
        Command::CountGpus => crate::binding::cmd_count_gpus(),
        Command::Bind(args) => {
            crate::binding::cmd_bind(args.bind, args.report_bindings, args.command)
        }
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
/// `help` is the command whose `--help` the message points to.
fn clap_error(program: &str, help: String, e: clap::Error) -> i32 {
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
            let message = one_line(&e.render().to_string());
            crate::stdio::eprint(&format!(
                "{program}: error: {message} (see {help} --help)\n"
            ));
            exit_code::USAGE
        }
    }
}

/// clap's rendered error as one line: `error: invalid value 'xml' for
/// '--format <FORMAT>'` and its `[possible values: sh, json]` line, or an
/// unknown option and clap's suggestion, become one line.
fn one_line(rendered: &str) -> String {
    let mut message = String::new();
    for line in rendered.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() {
            continue;
        }
        let line = line.trim_start_matches("error: ");
        // A similar option is the likely fix; "pass it as a value" is not.
        if line.starts_with("tip: to pass") && message.contains("tip: a similar") {
            continue;
        }
        if !message.is_empty() {
            message.push_str(if line.starts_with("tip:") { "; " } else { " " });
        }
        message.push_str(line);
    }
    if message.is_empty() {
        message = "invalid arguments".to_string();
    }
    message
}

/// `multinode SUBCOMMAND` when `args` name one (the first word that is not an
/// option), else `multinode`.
fn help_of(args: &[OsString]) -> String {
    use clap::CommandFactory;
    let cli = Cli::command();
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))
        .and_then(|word| cli.find_subcommand(word).filter(|c| !c.is_hide_set()))
        .map_or_else(
            || "multinode".to_string(),
            |c| format!("multinode {}", c.get_name()),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_error(args: &[&str]) -> String {
        let e = Cli::try_parse_from(args).expect_err("bad arguments");
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        format!(
            "{} (see {} --help)",
            one_line(&e.render().to_string()),
            help_of(&args)
        )
    }

    #[test]
    fn missing_argument_is_named() {
        assert_eq!(
            usage_error(&["multinode", "keygen"]),
            "the following required arguments were not provided: --output <FILE> (see multinode keygen --help)"
        );
    }

    #[test]
    fn invalid_value_lists_the_valid_ones() {
        assert_eq!(
            usage_error(&["multinode", "env", "--format", "xml"]),
            "invalid value 'xml' for '--format <FORMAT>' [possible values: sh, json] (see multinode env --help)"
        );
        assert_eq!(
            usage_error(&["multinode", "-v", "hosts", "--bogus"]),
            "unexpected argument '--bogus' found (see multinode hosts --help)"
        );
    }

    #[test]
    fn mistyped_option_gets_a_suggestion() {
        let e = ExecAllCli::try_parse_from(["mn-exec-all", "--lable", "-c", "true"])
            .expect_err("--lable is not an option");
        assert_eq!(
            one_line(&e.render().to_string()),
            "unexpected argument '--lable' found; tip: a similar argument exists: '--label'"
        );
    }
}
