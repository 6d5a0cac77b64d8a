//! Acceptance statistics of speculative runs at T = 0, gathered from their rounds
//! (`dspark eval`): the mean acceptance length τ (bonus token included), the
//! conditional acceptance of each draft position, the acceptance-length histogram, and
//! how well the confidence head predicts acceptance (per position, and the expected
//! calibration error over equal-width bins).
//!
//! A draft at position i is *reached* in a round when the target verified it and every
//! draft before it was accepted; its conditional acceptance is accepted / reached. A
//! confidence is judged only where its draft was reached (later drafts say nothing).

use serde::Serialize;

use crate::generate::Round;

/// Bins of the expected calibration error.
pub const ECE_BINS: usize = 10;

/// Accumulates rounds.
#[derive(Clone, Debug, Default)]
pub struct Acceptance {
    rounds: usize,
    committed: usize,
    histogram: Vec<usize>,
    reached: Vec<usize>,
    accepted: Vec<usize>,
    confidence_sum: Vec<f64>,
    confidence_reached: Vec<usize>,
    bins: [(usize, f64, usize); ECE_BINS],
}

/// One draft position's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PositionStats {
    /// Draft position (0 = the first draft after the anchor).
    pub position: usize,
    /// Rounds that reached it.
    pub reached: usize,
    /// Of those, rounds that accepted it.
    pub accepted: usize,
    /// accepted / reached (0 when never reached).
    pub rate: f64,
}

/// The confidence head at one draft position.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrationRow {
    /// Draft position.
    pub position: usize,
    /// Confidences judged (the position was reached).
    pub count: usize,
    /// Their mean.
    pub mean_predicted: f64,
    /// The acceptance rate observed there.
    pub observed: f64,
}

/// Calibration of the confidence head.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    /// Per position.
    pub per_position: Vec<CalibrationRow>,
    /// Expected calibration error over [`ECE_BINS`] equal-width bins of confidence:
    /// Σ_b (n_b / N) · |observed_b − mean predicted_b|.
    pub ece: f64,
    /// Confidences judged.
    pub count: usize,
}

impl Acceptance {
    /// Adds one round.
    pub fn add(&mut self, r: &Round) {
        self.rounds += 1;
        self.committed += r.accepted + 1;
        if self.histogram.len() <= r.accepted {
            self.histogram.resize(r.accepted + 1, 0);
        }
        self.histogram[r.accepted] += 1;
        let reached = r.verified.min(r.accepted + 1);
        for i in 0..reached {
            if self.reached.len() <= i {
                self.reached.resize(i + 1, 0);
                self.accepted.resize(i + 1, 0);
            }
            self.reached[i] += 1;
            let ok = i < r.accepted;
            self.accepted[i] += usize::from(ok);
            if let Some(&c) = r.confidences.get(i) {
                if self.confidence_sum.len() <= i {
                    self.confidence_sum.resize(i + 1, 0.0);
                    self.confidence_reached.resize(i + 1, 0);
                }
                let c = f64::from(c);
                self.confidence_sum[i] += c;
                self.confidence_reached[i] += 1;
                let b = ((c * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
                self.bins[b].0 += 1;
                self.bins[b].1 += c;
                self.bins[b].2 += usize::from(ok);
            }
        }
    }

    /// Rounds added.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// τ: tokens committed per round (accepted drafts + the bonus); 1 without rounds.
    pub fn mean_acceptance_length(&self) -> f64 {
        if self.rounds == 0 {
            1.0
        } else {
            self.committed as f64 / self.rounds as f64
        }
    }

    /// `histogram[m]`: rounds that accepted m drafts.
    pub fn histogram(&self) -> &[usize] {
        &self.histogram
    }

    /// Conditional acceptance per draft position.
    pub fn per_position(&self) -> Vec<PositionStats> {
        self.reached
            .iter()
            .zip(&self.accepted)
            .enumerate()
            .map(|(position, (&reached, &accepted))| PositionStats {
                position,
                reached,
                accepted,
                rate: ratio(accepted, reached),
            })
            .collect()
    }

    /// The confidence head's calibration; `None` when no round had confidences.
    pub fn calibration(&self) -> Option<Calibration> {
        let count: usize = self.bins.iter().map(|b| b.0).sum();
        if count == 0 {
            return None;
        }
        let per_position = self
            .confidence_reached
            .iter()
            .zip(&self.confidence_sum)
            .enumerate()
            .map(|(position, (&n, &sum))| CalibrationRow {
                position,
                count: n,
                mean_predicted: if n == 0 { 0.0 } else { sum / n as f64 },
                observed: ratio(self.accepted[position], self.reached[position]),
            })
            .collect();
        let ece = self
            .bins
            .iter()
            .filter(|b| b.0 > 0)
            .map(|&(n, sum, ok)| {
                let n_f = n as f64;
                (n_f / count as f64) * (ok as f64 / n_f - sum / n_f).abs()
            })
            .sum();
        Some(Calibration {
            per_position,
            ece,
            count,
        })
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(verified: usize, accepted: usize, conf: &[f32]) -> Round {
        Round {
            position: 0,
            anchor: 0,
            drafted: vec![0; verified],
            confidences: conf.to_vec(),
            verified,
            planned: verified,
            predicted_gain: 1.0,
            accepted,
            committed: vec![0; accepted + 1],
            q: Vec::new(),
            p: Vec::new(),
            rollback: None,
            rollback_seconds: None,
            draft_seconds: 0.0,
            verify_seconds: 0.0,
        }
    }

    #[test]
    fn figures_follow_their_definitions() {
        let mut a = Acceptance::default();
        a.add(&round(3, 3, &[0.95, 0.85, 0.75])); // all accepted: τ contribution 4
        a.add(&round(3, 1, &[0.95, 0.15, 0.75])); // second rejected, third not reached
        a.add(&round(3, 0, &[0.55, 0.5, 0.5])); // first rejected
        a.add(&round(1, 1, &[0.95, 0.85, 0.75])); // near the end: only one verified
        assert_eq!(a.rounds(), 4);
        assert!((a.mean_acceptance_length() - (4 + 2 + 1 + 2) as f64 / 4.0).abs() < 1e-12);
        assert_eq!(a.histogram(), &[1, 2, 0, 1]);
        let p = a.per_position();
        assert_eq!((p[0].reached, p[0].accepted), (4, 3));
        assert_eq!((p[1].reached, p[1].accepted), (2, 1));
        assert_eq!((p[2].reached, p[2].accepted), (1, 1));
        let c = a.calibration().unwrap();
        assert_eq!(c.count, 7);
        assert!((c.per_position[0].mean_predicted - (0.95 * 3.0 + 0.55) / 4.0).abs() < 1e-6);
        assert!((c.per_position[1].observed - 0.5).abs() < 1e-12);
        // Bins: 0.95 ×3 (all accepted), 0.55 (rejected), 0.85 (accepted), 0.15 (rejected),
        // 0.75 (accepted).
        let want = (3.0 * (1.0f64 - 0.95).abs()
            + (0.0f64 - 0.55).abs()
            + (1.0f64 - 0.85).abs()
            + (0.0f64 - 0.15).abs()
            + (1.0f64 - 0.75).abs())
            / 7.0;
        assert!((c.ece - want).abs() < 1e-6, "{} vs {want}", c.ece);
        assert!(Acceptance::default().calibration().is_none());
    }
}
