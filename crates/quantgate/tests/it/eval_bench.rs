//! `eval bench` (llama-bench style pp/tg). In its own test binary, single-threaded: cargo runs
//! test binaries one after another, and one thread never waits on a barrier for a descheduled
//! peer (CI has 2 cores; with other work beside it, 2-thread tg8 fell to 0.33 t/s).

use crate::common;

#[test]
fn eval_bench_reports_pp_and_tg_with_per_replicate_ratios() {
    let q = common::smollm2_q4_1();
    // The same file twice: the ratio is about 1 (timing noise only).
    // One thread: with two, any other process on a 2-core machine makes every graph barrier
    // wait for a descheduled thread (seen in CI: tg8 at 0.3–1.3 t/s instead of ~100).
    let mut heard = Vec::new();
    let rows = quantgate::eval::llama_bench::run(
        &[q.clone(), q],
        64,
        8,
        2,
        quantgate::threads::Threads::new(1).unwrap(),
        |i, n| heard.push((i, n)),
    )
    .unwrap();
    // 2 tests × 2 replicates × 2 models timed runs, each reported.
    assert_eq!(heard, (0..=8).map(|i| (i, 8)).collect::<Vec<_>>());
    assert_eq!(rows.len(), 4);
    let tests: Vec<&str> = rows.iter().map(|r| r.test.as_str()).collect();
    assert_eq!(tests, vec!["pp64", "tg8", "pp64", "tg8"]);
    for r in &rows {
        assert_eq!(r.samples_ts.len(), 2);
        assert!(r.avg_ts > 1.0 && r.avg_ts.is_finite(), "{r:?}");
    }
    let ratio = quantgate::eval::llama_bench::ratios(&rows[0], &rows[2]);
    assert_eq!(ratio.len(), 2);
    assert!(ratio.iter().all(|x| *x > 0.2 && *x < 5.0), "{ratio:?}");
}
