//! One integration-test binary: every module starts the real binaries.

mod runner;
mod util;

mod agent;
mod agent_login;
mod binding;
mod bounds;
mod bytepipe;
mod check;
mod diagnose;
mod docs;
mod env;
mod exec_all;
mod forward;
mod hardening;
mod heartbeat;
mod layers;
mod lifecycle;
mod lifecycle_join;
mod local_users;
mod messages;
mod mpi;
mod mux;
mod nodeset;
mod openssh;
mod procs;
mod restarts;
mod shell;
mod snapshot;
mod store;
mod terminal;
mod top;
mod topology;
