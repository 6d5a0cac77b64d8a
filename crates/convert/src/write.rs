//! The streaming writer: quantize in parallel, write in order, hash everything once.
//!
//! Four kinds of work overlap on a file of known layout ([`Plan::layout`]):
//! - **compute** (a rayon pool of `--threads` workers): each tensor is cut into chunks of
//!   [`CHUNK_ELEMS`] values; a chunk is decoded to f32, checked for non-finite values,
//!   quantized, and (for lossy types) dequantized to sum its error. Chunk boundaries do
//!   not depend on the thread count, and chunk sums are added in chunk order, so every
//!   figure is the same for any `--threads`.
//! - **writer** (one thread): takes chunks in file order, feeds each tensor's SHA256,
//!   writes the bytes at their offset, pads, and advances the written watermark.
//! - **hasher** (one thread): hashes the source files, then writes the header (which
//!   records those hashes), then hashes the output file from byte 0 as the watermark
//!   advances, reading back what was written.
//! - **flusher** (one thread): `fdatasync`s as data accumulates, so the disk works from
//!   the start instead of all at the end.
//!
//! Memory stays bounded: a few chunks in flight, never a whole tensor.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use dspark_gguf::{pad_to, GgmlType};
use dspark_quant::{float, kernels, ErrorSums};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::error::{ConvertError, Result};
use crate::plan::{Plan, PlannedTensor};
use crate::source::Checkpoint;

/// Values per chunk: a multiple of the Q8_0 block (32) and of the error-sum lanes (16).
pub const CHUNK_ELEMS: u64 = 1 << 20;
/// Bytes the flusher lets accumulate before the next `fdatasync`.
const FLUSH_EVERY: u64 = 64 << 20;
/// Read size of the output hasher.
const HASH_READ: usize = 8 << 20;

/// What converting one tensor measured.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorResult {
    /// Lowercase hex SHA256 of the tensor's data bytes (without padding).
    pub sha256: String,
    /// Error sums over every element (zero for F32 output).
    pub errors: ErrorSums,
}

/// What a finished write measured.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteResult {
    /// Lowercase hex SHA256 of each source weight file.
    pub source_sha256: Vec<String>,
    /// Lowercase hex SHA256 of the whole output file.
    pub output_sha256: String,
    /// Output size in bytes.
    pub output_size: u64,
    /// Per tensor, in plan order.
    pub tensors: Vec<TensorResult>,
}

/// A piece of a tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunk {
    pub(crate) tensor: usize,
    pub(crate) start: u64,
    pub(crate) len: u64,
}

pub(crate) struct ChunkOut {
    pub(crate) chunk: Chunk,
    pub(crate) bytes: Vec<u8>,
    pub(crate) errors: ErrorSums,
}

pub(crate) fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Cuts every tensor into chunks, in file order.
pub(crate) fn chunks(plan: &Plan) -> Vec<Chunk> {
    let mut out = Vec::new();
    for (i, t) in plan.tensors.iter().enumerate() {
        let n = t.n_elements();
        let mut start = 0;
        while start < n {
            let len = CHUNK_ELEMS.min(n - start);
            out.push(Chunk {
                tensor: i,
                start,
                len,
            });
            start += len;
        }
    }
    out
}

/// Output bytes of `len` values of type `ty` (Q8_0 chunks are whole blocks).
fn out_bytes(ty: GgmlType, len: u64) -> usize {
    ty.bytes_for(len).expect("chunks are whole blocks") as usize
}

thread_local! {
    /// Per-thread buffers: source bytes, decoded values, round-tripped values.
    static BUFS: std::cell::RefCell<(Vec<u8>, Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Converts one chunk, reading its source bytes.
pub(crate) fn compute_chunk(
    t: &PlannedTensor,
    ckpt: &Checkpoint,
    c: Chunk,
    allow_nonfinite: bool,
) -> Result<ChunkOut> {
    let k = kernels();
    let size = t.source_dtype.size() as u64;
    BUFS.with(|b| {
        let (raw, x, y) = &mut *b.borrow_mut();
        raw.resize((c.len * size) as usize, 0);
        ckpt.read(&ckpt.tensors[t.source_index], c.start * size, raw)?;
        x.resize(c.len as usize, 0.0);
        float::decode(t.source_dtype, raw, x);
        let finite = x.iter().fold(true, |ok, v| ok & v.is_finite());
        if !finite && !allow_nonfinite {
            let i = x
                .iter()
                .position(|v| !v.is_finite())
                .expect("a non-finite value exists");
            return Err(ConvertError::NonFinite {
                tensor: t.source_name.clone(),
                index: c.start + i as u64,
                value: x[i],
            });
        }
        let mut bytes = vec![0u8; out_bytes(t.ty, c.len)];
        // F32 output is exact: its round trip would be the input itself.
        let f = k
            .format(t.ty)
            .expect("the plan chooses types of the kernel table");
        let quantize = f
            .quantize
            .expect("the plan chooses types dspark writes (F32, F16, BF16, Q8_0)");
        quantize(x, &mut bytes);
        if !allow_nonfinite {
            if let Some(i) = (f.first_non_finite)(&bytes) {
                let block = &x[i..(i + f.block_len()).min(x.len())];
                let value = block
                    .iter()
                    .fold(0.0f32, |m, v| if v.abs() > m.abs() { *v } else { m });
                return Err(ConvertError::Unrepresentable {
                    tensor: t.source_name.clone(),
                    index: c.start + i as u64,
                    value,
                    ty: t.ty.name().to_string(),
                });
            }
        }
        let lossy = t.ty != GgmlType::F32;
        if lossy {
            y.resize(x.len(), 0.0);
            (f.dequantize)(&bytes, y);
        }
        let errors = if lossy {
            (k.error_sums)(x, y)
        } else {
            ErrorSums::default()
        };
        Ok(ChunkOut {
            chunk: c,
            bytes,
            errors,
        })
    })
}

/// Shared state between the writer, the hasher and the flusher.
struct Shared {
    /// Set when any stage fails or the run is cancelled.
    stop: AtomicBool,
    /// First error raised by any stage.
    error: Mutex<Option<ConvertError>>,
    /// Absolute end of the contiguous region written so far (data only).
    written: AtomicU64,
    wake: Condvar,
    lock: Mutex<()>,
}

impl Shared {
    fn fail(&self, e: ConvertError) {
        let mut slot = self.error.lock().expect("error slot");
        if slot.is_none() {
            *slot = Some(e);
        }
        self.stop.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }

    fn advance(&self, to: u64) {
        self.written.store(to, Ordering::SeqCst);
        let _g = self.lock.lock().expect("wake lock");
        self.wake.notify_all();
    }

    /// Waits until `written > seen` or stop; returns the new watermark.
    fn wait_past(&self, seen: u64) -> u64 {
        let mut g = self.lock.lock().expect("wake lock");
        loop {
            let w = self.written.load(Ordering::SeqCst);
            if w > seen || self.stop.load(Ordering::SeqCst) {
                return w;
            }
            g = self
                .wake
                .wait_timeout(g, Duration::from_millis(50))
                .expect("wake lock")
                .0;
        }
    }
}

/// Writes the GGUF `plan` describes into `file` (an empty temporary file), streaming
/// from `ckpt`. `dest` is the final path, used in messages. `threads` sizes the compute
/// pool; `cancel` is polled between chunks; `progress` is called with the data bytes and
/// the tensors written so far. The file is fsynced and the source checked unchanged
/// before this returns `Ok`.
pub fn write_gguf(
    plan: &Plan,
    ckpt: &Checkpoint,
    file: &File,
    dest: &std::path::Path,
    threads: usize,
    cancel: &AtomicBool,
    progress: &(dyn Fn(u64, usize) + Sync),
) -> Result<WriteResult> {
    let layout = plan.layout();
    let out_path = || dest.to_path_buf();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("dspark-quantize-{i}"))
        .build()
        .map_err(|e| ConvertError::Output {
            path: out_path(),
            msg: format!("cannot start threads: {e}"),
        })?;
    let shared = Shared {
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
        written: AtomicU64::new(layout.data_offset),
        wake: Condvar::new(),
        lock: Mutex::new(()),
    };
    let all_chunks = chunks(plan);
    let window = 2 * threads.max(1);
    let (tx, rx) = sync_channel::<ChunkOut>(window * 2);
    let io_err = |e: std::io::Error| ConvertError::Output {
        path: out_path(),
        msg: if e.kind() == std::io::ErrorKind::StorageFull {
            format!(
                "no space left on device (the output needs {} bytes); nothing was written",
                layout.file_size
            )
        } else {
            format!("write failed: {e}")
        },
    };

    let (tensor_results, source_sha256, output_sha256) = std::thread::scope(|s| {
        // Writer.
        let writer = s.spawn(|| writer_stage(plan, &layout, file, rx, &shared, progress, io_err));
        // Hasher.
        let hasher = s.spawn(|| -> Option<(Vec<String>, String)> {
            let mut source_sha = Vec::new();
            for i in 0..ckpt.files.len() {
                match ckpt.hash_file(i, &shared.stop) {
                    Ok(Some(h)) => source_sha.push(h),
                    Ok(None) => return None,
                    Err(e) => {
                        shared.fail(e);
                        return None;
                    }
                }
            }
            let header = plan.header(&source_sha).to_bytes();
            debug_assert_eq!(header.len() as u64, layout.data_offset);
            if let Err(e) = file.write_all_at(&header, 0) {
                shared.fail(io_err(e));
                return None;
            }
            let mut h = Sha256::new();
            let mut buf = vec![0u8; HASH_READ];
            let mut pos = 0u64;
            while pos < layout.file_size {
                let w = if pos < layout.data_offset {
                    layout.data_offset
                } else {
                    shared.wait_past(pos)
                };
                if shared.stop.load(Ordering::SeqCst) {
                    return None;
                }
                let end = w.min(layout.file_size);
                while pos < end {
                    let n = ((end - pos) as usize).min(buf.len());
                    if let Err(e) = file.read_exact_at(&mut buf[..n], pos) {
                        shared.fail(ConvertError::Output {
                            path: out_path(),
                            msg: format!("reading back for the hash failed: {e}"),
                        });
                        return None;
                    }
                    h.update(&buf[..n]);
                    pos += n as u64;
                }
            }
            Some((source_sha, hex(&h.finalize())))
        });
        // Flusher.
        s.spawn(|| {
            let mut synced = 0u64;
            loop {
                let w = shared.wait_past(
                    synced + FLUSH_EVERY.min(layout.file_size.saturating_sub(synced + 1)),
                );
                if shared.stop.load(Ordering::SeqCst) || w >= layout.file_size {
                    return;
                }
                if let Err(e) = file.sync_data() {
                    shared.fail(io_err(e));
                    return;
                }
                synced = w;
            }
        });

        // Compute, in windows of chunks, in order.
        'outer: for batch in all_chunks.chunks(window) {
            if cancel.load(Ordering::SeqCst) {
                shared.fail(ConvertError::Cancelled);
                break;
            }
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let outs: Vec<Result<ChunkOut>> = pool.install(|| {
                batch
                    .par_iter()
                    .map(|&c| {
                        let t = &plan.tensors[c.tensor];
                        compute_chunk(t, ckpt, c, plan.options.allow_nonfinite)
                    })
                    .collect()
            });
            for out in outs {
                match out {
                    Ok(o) => {
                        if tx.send(o).is_err() {
                            break 'outer;
                        }
                    }
                    Err(e) => {
                        shared.fail(e);
                        break 'outer;
                    }
                }
            }
        }
        drop(tx);
        let tensor_results = writer.join().expect("writer thread");
        let hashes = hasher.join().expect("hasher thread");
        shared.stop.store(true, Ordering::SeqCst);
        shared.wake.notify_all();
        (
            tensor_results,
            hashes.as_ref().map(|h| h.0.clone()),
            hashes.map(|h| h.1),
        )
    });
    if let Some(e) = shared.error.lock().expect("error slot").take() {
        return Err(e);
    }
    let (Some(tensors), Some(source_sha256), Some(output_sha256)) =
        (tensor_results, source_sha256, output_sha256)
    else {
        return Err(ConvertError::Output {
            path: out_path(),
            msg: "a pipeline stage stopped without saying why".into(),
        });
    };
    // Everything read came from the files as they were when opened, or we say so.
    ckpt.check_unchanged()?;
    file.sync_all().map_err(io_err)?;
    Ok(WriteResult {
        source_sha256,
        output_sha256,
        output_size: layout.file_size,
        tensors,
    })
}

fn writer_stage(
    plan: &Plan,
    layout: &dspark_gguf::Layout,
    file: &File,
    rx: Receiver<ChunkOut>,
    shared: &Shared,
    progress: &(dyn Fn(u64, usize) + Sync),
    io_err: impl Fn(std::io::Error) -> ConvertError,
) -> Option<Vec<TensorResult>> {
    let mut results = Vec::with_capacity(plan.tensors.len());
    let mut hasher = Sha256::new();
    let mut errors = ErrorSums::default();
    let mut pos_in_tensor = 0u64;
    let mut done = 0u64;
    for out in rx {
        if shared.stop.load(Ordering::SeqCst) {
            return None;
        }
        let c = out.chunk;
        let t = &plan.tensors[c.tensor];
        debug_assert_eq!(results.len(), c.tensor, "chunks arrive in file order");
        let (t_off, t_bytes) = layout.tensors[c.tensor];
        let at = layout.data_offset + t_off + pos_in_tensor;
        if let Err(e) = file.write_all_at(&out.bytes, at) {
            shared.fail(io_err(e));
            return None;
        }
        hasher.update(&out.bytes);
        errors.add(&out.errors);
        pos_in_tensor += out.bytes.len() as u64;
        done += out.bytes.len() as u64;
        let mut end = at + out.bytes.len() as u64;
        if c.start + c.len == t.n_elements() {
            debug_assert_eq!(pos_in_tensor, t_bytes);
            let pad = pad_to(t_bytes, layout.alignment).expect("layout fits") - t_bytes;
            if pad > 0 {
                if let Err(e) = file.write_all_at(&vec![0u8; pad as usize], end) {
                    shared.fail(io_err(e));
                    return None;
                }
                end += pad;
            }
            results.push(TensorResult {
                sha256: hex(&std::mem::take(&mut hasher).finalize()),
                errors: std::mem::take(&mut errors),
            });
            pos_in_tensor = 0;
        }
        shared.advance(end);
        progress(done, results.len());
    }
    (results.len() == plan.tensors.len()).then_some(results)
}
