//! The `nodewright` binary: see [`nodewright_reconciler::cli`].

// The one unsafe call, the allocator's option setter, allows it below.
#![deny(unsafe_code)]

/// A long-running controller allocates and frees watch objects and snapshots at a high rate;
/// mimalloc keeps that cheap and returns freed memory instead of fragmenting the heap. It is
/// built without transparent huge pages (`no_thp`): objects of a few hundred bytes come and
/// go, and a heap that asks for huge pages has the kernel zero 2 MiB at each fresh touch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option: its position in the option enum of `mimalloc.h`, which
/// mimalloc keeps stable across versions (retired options keep their slots), and its default
/// in version 3.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const PURGE_DELAY_DEFAULT_MS: std::ffi::c_long = 1000;

/// How long freed memory stays with a process that runs until stopped before it goes back to
/// the OS. A pass over a large fleet frees the batch of Jobs it built just before the
/// watches decode their answers; at mimalloc 3's second both are resident at once (10,000
/// nodes: 520 MiB at peak instead of 500), and the kernel's memory limit counts what is
/// resident. Ten milliseconds is mimalloc 2's default, and costs the reconciler no
/// measurable CPU; a simulated 10,000-node rollout, which churns far more memory per second,
/// spends twice the time in the kernel with it, so commands that end keep mimalloc's second.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Sets the purge delay unless the environment chose one (`MIMALLOC_PURGE_DELAY`, which
/// mimalloc reads itself) or the option does not read as version 3's default, as it would
/// were the enum ever renumbered.
fn purge_freed_memory_promptly() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: both calls read or write one integer of mimalloc's option table, before the
    // runtime starts any thread; mimalloc reads the option again each time it schedules a
    // purge, so the new value applies from here on.
    unsafe {
        if libmimalloc_sys::mi_option_get(PURGE_DELAY) == PURGE_DELAY_DEFAULT_MS {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS);
        }
    }
}

fn main() -> std::process::ExitCode {
    nodewright_reconciler::cli::main(|command| {
        if command.lives_under_a_memory_limit() {
            purge_freed_memory_promptly();
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn freed_memory_goes_back_to_the_os_after_ten_milliseconds() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        super::purge_freed_memory_promptly();
        #[allow(unsafe_code)]
        // SAFETY: reads one integer of mimalloc's option table.
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(delay, super::PURGE_DELAY_MS);
    }
}
