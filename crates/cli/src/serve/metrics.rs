//! `GET /metrics`: Prometheus text with llama-server's names (`llamacpp:…`) where it has
//! them, and dspark's own (`dspark:…`) for what it counts besides.

use prometheus::{Counter, CounterVec, Encoder, Gauge, IntCounter, IntGauge, Opts, Registry};

use dspark_runtime::generate::Stats;

/// The server's counters and gauges.
pub struct Metrics {
    registry: Registry,
    prompt_tokens: Counter,
    prompt_seconds: Counter,
    predicted: Counter,
    predicted_seconds: Counter,
    n_tokens_max: Gauge,
    drafts: Counter,
    draft_tokens: Counter,
    accepted: Counter,
    accepted_per_pos: CounterVec,
    prompt_rate: Gauge,
    predicted_rate: Gauge,
    forwards: IntCounter,
    forward_sessions: IntCounter,
    forward_columns: IntCounter,
    busy_per_forward: Gauge,
    forward_seconds: Counter,
    prefill_seconds: Counter,
    /// Requests a slot is serving.
    pub processing: IntGauge,
    /// Requests waiting for a slot.
    pub deferred: IntGauge,
    /// Requests refused because the queue was full or the server was closing (503).
    pub rejected: IntCounter,
    /// Requests that failed inside a slot (500).
    pub failed: IntCounter,
    /// Requests answered, by outcome.
    pub requests: CounterVec,
}

impl Metrics {
    /// The metrics of a server whose rounds verify at most `drafts` drafts (each position's
    /// acceptance counter is shown from the start, as llama-server shows them).
    pub fn new(drafts: usize) -> Metrics {
        let registry = Registry::new();
        fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
            r.register(Box::new(m.clone()))
                .expect("metric names are unique");
            m
        }
        let c = |name: &str, help: &str| {
            reg(&registry, Counter::new(name, help).expect("a valid name"))
        };
        let g =
            |name: &str, help: &str| reg(&registry, Gauge::new(name, help).expect("a valid name"));
        let m = Metrics {
            prompt_tokens: c(
                "llamacpp:prompt_tokens_total",
                "Number of prompt tokens processed",
            ),
            prompt_seconds: c(
                "llamacpp:prompt_seconds_total",
                "Total time spent processing prompts",
            ),
            predicted: c(
                "llamacpp:tokens_predicted_total",
                "Number of generation tokens processed",
            ),
            predicted_seconds: c(
                "llamacpp:tokens_predicted_seconds_total",
                "Total time spent generating tokens",
            ),
            n_tokens_max: g(
                "llamacpp:n_tokens_max",
                "Largest observed sequence length (prompt + generation)",
            ),
            drafts: c(
                "llamacpp:spec_decode_num_drafts_total",
                "Speculative: Total speculative decoding verification steps",
            ),
            draft_tokens: c(
                "llamacpp:spec_decode_num_draft_tokens_total",
                "Speculative: Total draft tokens verified",
            ),
            accepted: c(
                "llamacpp:spec_decode_num_accepted_tokens_total",
                "Speculative: Total draft tokens accepted by the target model",
            ),
            accepted_per_pos: reg(
                &registry,
                CounterVec::new(
                    Opts::new(
                        "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
                        "Accepted tokens per draft position",
                    ),
                    &["position"],
                )
                .expect("a valid name"),
            ),
            prompt_rate: g(
                "llamacpp:prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
            ),
            predicted_rate: g(
                "llamacpp:predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
            ),
            forwards: reg(
                &registry,
                IntCounter::new(
                    "dspark:batched_forwards_total",
                    "Target forwards of decode and verify steps (each over every slot that took part)",
                )
                .expect("a valid name"),
            ),
            forward_sessions: reg(
                &registry,
                IntCounter::new(
                    "dspark:batched_forward_slots_total",
                    "Slots that took part in those forwards, summed",
                )
                .expect("a valid name"),
            ),
            forward_columns: reg(
                &registry,
                IntCounter::new(
                    "dspark:batched_forward_columns_total",
                    "Token columns of those forwards, summed",
                )
                .expect("a valid name"),
            ),
            busy_per_forward: g(
                "llamacpp:n_busy_slots_per_decode",
                "Average number of busy slots per target forward of decode and verify steps",
            ),
            forward_seconds: c(
                "dspark:batched_forward_seconds_total",
                "Seconds in those forwards",
            ),
            prefill_seconds: c(
                "dspark:prefill_forward_seconds_total",
                "Seconds in prompt forwards (each alone, in llama.cpp's prompt order)",
            ),
            processing: reg(
                &registry,
                IntGauge::new(
                    "llamacpp:requests_processing",
                    "Number of requests processing",
                )
                .expect("a valid name"),
            ),
            deferred: reg(
                &registry,
                IntGauge::new("llamacpp:requests_deferred", "Number of requests deferred")
                    .expect("a valid name"),
            ),
            rejected: reg(
                &registry,
                IntCounter::new(
                    "dspark:requests_rejected_total",
                    "Requests refused with 503 (queue full or shutting down)",
                )
                .expect("a valid name"),
            ),
            failed: reg(
                &registry,
                IntCounter::new(
                    "dspark:requests_failed_total",
                    "Requests that failed inside a slot",
                )
                .expect("a valid name"),
            ),
            requests: reg(
                &registry,
                CounterVec::new(
                    Opts::new("dspark:http_requests_total", "HTTP requests answered"),
                    &["status"],
                )
                .expect("a valid name"),
            ),
            registry,
        };
        for p in 0..drafts {
            m.accepted_per_pos.with_label_values(&[&p.to_string()]);
        }
        m
    }

    /// A speculative round: `verified` drafts, the first `accepted` of them accepted.
    pub fn round(&self, verified: usize, accepted: usize) {
        self.drafts.inc();
        self.draft_tokens.inc_by(verified as f64);
        self.accepted.inc_by(accepted as f64);
        for p in 0..accepted {
            self.accepted_per_pos
                .with_label_values(&[&p.to_string()])
                .inc();
        }
    }

    /// A batched target forward over `slots` slots' `columns` tokens.
    pub fn forward(&self, slots: usize, columns: usize, seconds: f64) {
        self.forward_seconds.inc_by(seconds);
        self.forwards.inc();
        self.forward_sessions.inc_by(slots as u64);
        self.forward_columns.inc_by(columns as u64);
        self.busy_per_forward
            .set(self.forward_sessions.get() as f64 / self.forwards.get() as f64);
    }

    /// A prompt forward of `seconds`.
    pub fn prefill(&self, seconds: f64) {
        self.prefill_seconds.inc_by(seconds);
    }

    /// A finished run's counts and times.
    pub fn record(&self, s: &Stats) {
        self.prompt_tokens.inc_by(s.prompt_tokens as f64);
        self.prompt_seconds.inc_by(s.seconds.prompt);
        self.predicted.inc_by(s.generated as f64);
        self.predicted_seconds.inc_by(s.seconds.eval);
        let n = (s.prompt_tokens + s.prompt_cached + s.generated) as f64;
        if n > self.n_tokens_max.get() {
            self.n_tokens_max.set(n);
        }
        let rate = |n: f64, t: f64| if t > 0.0 { n / t } else { 0.0 };
        self.prompt_rate
            .set(rate(self.prompt_tokens.get(), self.prompt_seconds.get()));
        self.predicted_rate
            .set(rate(self.predicted.get(), self.predicted_seconds.get()));
    }

    /// The Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding of registered metrics");
        String::from_utf8(buf).expect("the text format is UTF-8")
    }
}
