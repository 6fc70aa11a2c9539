//! The `nodewright` binary: see [`nodewright_reconciler::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    nodewright_reconciler::cli::main()
}
