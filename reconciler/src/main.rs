//! The `nodewright` binary: see [`nodewright_reconciler::cli`].

fn main() -> std::process::ExitCode {
    nodewright_reconciler::cli::main()
}
