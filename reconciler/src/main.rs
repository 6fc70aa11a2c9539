//! The `nodewright` binary: see [`nodewright_reconciler::cli`].

#![forbid(unsafe_code)]

/// A long-running controller allocates and frees watch objects and snapshots at a high rate;
/// mimalloc keeps that cheap and returns freed memory instead of fragmenting the heap. It is
/// built without transparent huge pages (`no_thp`): objects of a few hundred bytes come and
/// go, and a heap that asks for huge pages has the kernel zero 2 MiB at each fresh touch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    nodewright_reconciler::cli::main()
}
