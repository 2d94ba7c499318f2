//! serde_json writes a non-finite `f64` as `null`; these read `null` back as NaN, so a report
//! holding a NaN measurement (a broken model's logits, an undeclared threshold) deserializes
//! into the same type that wrote it. Use with `#[serde(deserialize_with = "…")]`.

use serde::{Deserialize, Deserializer};

/// An `f64` field: a number, or `null` for NaN.
pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// A `Vec<f64>` field whose elements may be `null` (NaN).
pub fn vec_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(|x| x.unwrap_or(f64::NAN))
        .collect())
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct R {
        #[serde(deserialize_with = "super::f64")]
        x: f64,
        #[serde(deserialize_with = "super::vec_f64")]
        v: Vec<f64>,
    }

    #[test]
    fn nan_round_trips_through_null() {
        let s = serde_json::to_string(&R {
            x: f64::NAN,
            v: vec![1.0, f64::NAN],
        })
        .unwrap();
        assert_eq!(s, r#"{"x":null,"v":[1.0,null]}"#);
        let r: R = serde_json::from_str(&s).unwrap();
        assert!(r.x.is_nan() && r.v[0] == 1.0 && r.v[1].is_nan());
    }
}
