//! `nodewright-agent`: thin wrapper over [`nodewright_agent::run`].

#![forbid(unsafe_code)]

fn main() {
    nodewright_agent::signals::install();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = nodewright_agent::run(&argv, nodewright_agent::env::AgentEnv::from_process());
    std::process::exit(code);
}
