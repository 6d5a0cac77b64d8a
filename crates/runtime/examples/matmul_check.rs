//! matmul_check: every plain product of llama.cpp's first forward, recomputed by dspark's
//! kernels on llama.cpp's own input and compared bit for bit — for any architecture, so a
//! graph without an `op_check` (kimi-k3) can at least clear or blame its products.
//! `bench/llama_dump --dump DIR` writes the nodes, with each node's inputs by name.
//!
//! ```text
//! llama_dump MODEL.gguf --tokens 1,2,3 --dump DIR --out x.json [--no-repack]
//! matmul_check MODEL.gguf DIR          # DSPARK_REPACK=0 to match --no-repack
//! ```
//!
//! Prints one line per `MUL_MAT` of a 2-D weight on a dumped input: the weight, its type,
//! the columns, elements that differ, the largest difference. Products take llama.cpp's
//! prompt order (the dumped forward is a prompt's).

use std::collections::HashMap;
use std::error::Error;
use std::path::Path;

use dspark_gguf::GgufFile;
use dspark_quant::gemm::gemm;
use dspark_quant::Matrix;

fn read_f32(path: &Path) -> Result<Vec<f32>, Box<dyn Error>> {
    Ok(std::fs::read(path)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn main() -> Result<(), Box<dyn Error>> {
    dspark_quant::gemm::prompt_order(run)
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, dir, ..] = args.as_slice() else {
        return Err("usage: matmul_check MODEL.gguf DUMP_DIR".into());
    };
    let bytes = std::fs::read(model)?;
    let file = GgufFile::parse(&bytes)?;
    let dir = Path::new(dir);
    let relaid = std::env::var("DSPARK_REPACK").as_deref() != Ok("0");
    // Node name → its dump file (the last node of that name before a use).
    let mut files: HashMap<String, String> = HashMap::new();
    let (mut checked, mut differing) = (0, 0);
    for line in std::fs::read_to_string(dir.join("index.txt"))?.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some((_, name)) = f[0].split_once('_') else {
            continue;
        };
        let op = f[f.len() - 1];
        let srcs: Vec<&str> = f
            .iter()
            .find_map(|x| x.strip_prefix("src="))
            .map(|s| s.split(',').collect())
            .unwrap_or_default();
        if op == "MUL_MAT" && srcs.len() == 2 {
            let (w, x) = (srcs[0], srcs[1].replace(['(', ')'], "_"));
            if let (Ok(t), Some(xfile)) = (file.tensor(w), files.get(&x)) {
                let dims = &t.info.dims;
                if dims.len() == 2 || dims[2..].iter().all(|&d| d == 1) {
                    let (cols, rows) = (dims[0] as usize, dims[1] as usize);
                    let m = Matrix::new(t.info.ty, rows, cols, t.data).ok_or("no kernel")?;
                    let m = if relaid { m } else { m.not_relaid() };
                    let xs = read_f32(&dir.join(format!("{xfile}.f32")))?;
                    let want = read_f32(&dir.join(format!("{}.f32", f[0])))?;
                    if xs.len() % cols == 0 && want.len() == xs.len() / cols * rows {
                        let mut y = vec![0.0f32; want.len()];
                        gemm(&m, &xs, &mut y);
                        let differ = y
                            .iter()
                            .zip(&want)
                            .filter(|(a, b)| a.to_bits() != b.to_bits())
                            .count();
                        let max = y
                            .iter()
                            .zip(&want)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0f32, f32::max);
                        checked += 1;
                        differing += usize::from(differ > 0);
                        println!(
                            "{w:40} {:8} n {:3}  differ {differ:6}  max {max:.3e}",
                            t.info.ty.to_string(),
                            xs.len() / cols
                        );
                    }
                }
            }
        }
        files.insert(name.to_string(), f[0].to_string());
    }
    println!("{checked} products checked, {differing} differ");
    Ok(())
}
