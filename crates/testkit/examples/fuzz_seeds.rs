//! Writes the runtime-loader fuzz seeds: `fuzz/corpus/runtime_load/micro-{target,drafter}.gguf`
//! (`cargo run -p dspark-testkit --example fuzz_seeds`). A runtime test checks the committed
//! files still equal what this writes.

fn main() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/runtime_load");
    let (t, d) = dspark_testkit::micro_pair();
    std::fs::create_dir_all(&dir).expect("the corpus folder");
    dspark_testkit::write_atomic(&dir.join("micro-target.gguf"), &t).expect("the target seed");
    dspark_testkit::write_atomic(&dir.join("micro-drafter.gguf"), &d).expect("the drafter seed");
}
