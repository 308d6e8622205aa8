//! `geo.star` (qri-io/starlib v0.5.0): `geo.Point`, `geo.Line`, `geo.Polygon`,
//! `geo.MultiPolygon`, `geo.within`, `geo.intersects` and `geo.parseGeoJSON`, with the meaning
//! starlib gives them over paulmach/orb.
//!
//! Point-in-polygon is the geo crate's; GeoJSON is read with serde_json. Distances and
//! lengths follow orb's formulas exactly (its "geodesic" distance is an equirectangular
//! approximation on a sphere of radius 6,378,137 m, which the geo crate does not offer), so a
//! program computes the same floats as under the catalog's image.
//!
//! Coordinates are held outside the Starlark heap: every geometry is measured against what is
//! left of the heap budget before it is built, rings and polygons are shared (not copied) when
//! a polygon is indexed or a larger geometry is made of existing ones, and a GeoJSON text is
//! refused before parsing when what the parse could make passes the budget.

use std::fmt;
use std::sync::Arc;

use allocative::Allocative;
use geo::CoordinatePosition;
use geo::coordinate_position::CoordPos;
use starlark::collections::StarlarkHasher;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder, MethodsStatic};
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::dict::AllocDict;
use starlark::values::float::UnpackFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::{AllocTuple, UnpackTuple};
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagablePanic, StarlarkValue, UnpackValue, Value,
    ValueLike,
};
use starlark_derive::starlark_value;

use super::{heap_left, hold_outside_heap, over_budget};

/// orb's `EarthRadius`, in metres.
const EARTH_RADIUS: f64 = 6_378_137.0;
/// Bytes a coordinate pair takes.
const PAIR_BYTES: u64 = 16;
/// Bytes a ring or polygon takes besides its contents (the shared pointer and its counts).
const PART_BYTES: u64 = 40;
/// Heap bytes a Point value takes when a Line is iterated (the value and its header).
const POINT_VALUE_BYTES: u64 = 32;
/// What parsing one byte of GeoJSON may make at most: serde_json's tree (a number there holds
/// its digits as text), the coordinates and the Starlark values.
const GEOJSON_BYTES_PER_BYTE: u64 = 64;

type Pair = [f64; 2];
type Ring = Arc<[Pair]>;
type Rings = Arc<[Ring]>;

pub fn add_geo(builder: &mut GlobalsBuilder) {
    builder.namespace("geo", geo_module);
}

fn error(function: &str, message: impl fmt::Display) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("geo.{function}: {message}"))
}

/// A number as starlib takes it: an int (within int64) or a float; nothing else.
fn number(function: &str, value: Value) -> starlark::Result<f64> {
    match value.get_type() {
        "int" | "float" => {
            let number = UnpackFloat::unpack_value_opt(value)
                .map(|n| n.0)
                .ok_or_else(|| error(function, "invalid int"))?;
            if value.get_type() == "int" && number.abs() >= 9.223_372_036_854_776e18 {
                return Err(error(function, "invalid int"));
            }
            Ok(number)
        }
        other => Err(error(
            function,
            format!("invalid type '{other}' expected int or float"),
        )),
    }
}

/// The list a constructor requires (starlib takes only lists, not tuples).
fn list_argument<'v>(
    function: &str,
    parameter: &str,
    value: Value<'v>,
) -> starlark::Result<&'v [Value<'v>]> {
    ListRef::from_value(value)
        .map(|list| list.content())
        .ok_or_else(|| {
            error(
                function,
                format!(
                    "for parameter {parameter}: got {}, want list",
                    value.get_type()
                ),
            )
        })
}

/// Refuses `bytes` of coordinates when they pass what is left of the heap budget, else counts
/// them as held outside the heap.
fn reserve(what: &str, bytes: u64, heap: Heap) -> starlark::Result<()> {
    let left = heap_left(heap);
    if bytes > left {
        return Err(over_budget(what, Some(bytes), left));
    }
    hold_outside_heap(bytes);
    Ok(())
}

/// The points of a `Line` argument's list: Points or two-number lists.
fn pairs_of(function: &str, items: &[Value]) -> starlark::Result<Vec<Pair>> {
    items
        .iter()
        .map(|&item| {
            if let Some(point) = item.downcast_ref::<GeoPoint>() {
                return Ok([point.x, point.y]);
            }
            match ListRef::from_value(item) {
                Some(list) if list.len() == 2 => Ok([
                    number(function, list.content()[0])?,
                    number(function, list.content()[1])?,
                ]),
                Some(list) => Err(error(
                    function,
                    format!(
                        "wrong number elements for point. expected 2, got: {}",
                        list.len()
                    ),
                )),
                None => Err(error(
                    function,
                    format!("invalid type '{}' to create line", item.get_type()),
                )),
            }
        })
        .collect()
}

fn is_closed(ring: &[Pair]) -> bool {
    ring.first().is_some_and(|first| Some(first) == ring.last())
}

/// orb's planar distance.
fn planar_distance(a: Pair, b: Pair) -> f64 {
    let (dx, dy) = (a[0] - b[0], a[1] - b[1]);
    (dx * dx + dy * dy).sqrt()
}

/// orb's `geo.Distance`: x is the longitude, y the latitude, in degrees; the result in metres.
fn geodesic_distance(a: Pair, b: Pair) -> f64 {
    let radians = |degrees: f64| degrees * std::f64::consts::PI / 180.0;
    let latitude = radians(a[1] - b[1]);
    let mut longitude = radians(a[0] - b[0]).abs();
    if longitude > std::f64::consts::PI {
        longitude = 2.0 * std::f64::consts::PI - longitude;
    }
    let x = longitude * radians((a[1] + b[1]) / 2.0).cos();
    (latitude * latitude + x * x).sqrt() * EARTH_RADIUS
}

fn total_length(points: &[Pair], distance: fn(Pair, Pair) -> f64) -> f64 {
    points.windows(2).map(|w| distance(w[0], w[1])).sum()
}

/// Whether the ring holds `point`, its boundary included (as orb's `RingContains`).
fn ring_holds(ring: &[Pair], point: geo::Coord) -> bool {
    let ring: geo::LineString = ring.iter().map(|&[x, y]| geo::Coord { x, y }).collect();
    geo::Polygon::new(ring, Vec::new()).coordinate_position(&point) != CoordPos::Outside
}

/// orb's `PolygonContains`: inside (or on) the outer ring and not inside (or on) a hole.
fn polygon_holds(rings: &[Ring], point: geo::Coord) -> bool {
    match rings.split_first() {
        Some((outer, holes)) => {
            ring_holds(outer, point) && !holes.iter().any(|hole| ring_holds(hole, point))
        }
        None => false,
    }
}

/// Go's `%f`.
fn go_fixed(number: f64) -> String {
    if number.is_nan() {
        "NaN".to_owned()
    } else if number.is_infinite() {
        if number > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{number:.6}")
    }
}

/// At most how long Go's `%f` of `number` is: sign, integer digits, point and six decimals.
fn go_fixed_bytes(number: f64) -> u64 {
    let magnitude = number.abs();
    let digits = if magnitude >= 10.0 {
        // Up to 309 for the largest floats; NaN and infinities are shorter.
        (magnitude.log10().floor() as u64)
            .saturating_add(2)
            .min(310)
    } else {
        1
    };
    digits + 8
}

/// How long the text of a Line value is at most, measured without making it: a Line's text
/// grows with its points and a huge coordinate takes over 300 characters, so `str()` and
/// `print` must refuse it before it is written. `None` for other values.
pub fn text_bytes(value: Value) -> Option<u64> {
    let line = value.downcast_ref::<GeoLine>()?;
    Some(
        line.0
            .iter()
            .map(|&[x, y]| go_fixed_bytes(x) + go_fixed_bytes(y) + 4)
            .sum::<u64>()
            + 2,
    )
}

fn hash_pairs(pairs: &[Pair], hasher: &mut StarlarkHasher) {
    use std::hash::Hasher as _;
    for &[x, y] in pairs {
        // -0.0 equals 0.0, so both hash alike.
        hasher.write_u64((x + 0.0).to_bits());
        hasher.write_u64((y + 0.0).to_bits());
    }
}

/// The item at a Starlark index (negative counts from the end).
fn position(what: &str, index: Value, len: usize) -> starlark::Result<usize> {
    let i = index.unpack_i32().ok_or_else(|| {
        error(
            what,
            format!("index must be an int, not {}", index.get_type()),
        )
    })? as i64;
    let at = if i < 0 { i + len as i64 } else { i };
    usize::try_from(at)
        .ok()
        .filter(|&at| at < len)
        .ok_or_else(|| error(what, format!("index {i} out of range: length is {len}")))
}

#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct GeoPoint {
    x: f64,
    y: f64,
}

starlark_simple_value!(GeoPoint);

impl fmt::Display for GeoPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", go_fixed(self.x), go_fixed(self.y))
    }
}

static POINT_METHODS: MethodsStatic = MethodsStatic::new("krm-geo-point", point_methods);

#[starlark_value(type = "Point")]
impl<'v> StarlarkValue<'v> for GeoPoint {
    fn get_methods() -> Option<&'static Methods> {
        Some(POINT_METHODS.methods())
    }

    /// starlib's truth: both coordinates non-zero.
    fn to_bool(&self) -> bool {
        self.x != 0.0 && self.y != 0.0
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<GeoPoint>()
            .is_some_and(|o| o.x == self.x && o.y == self.y))
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        hash_pairs(&[[self.x, self.y]], hasher);
        Ok(())
    }
}

fn point_of<'v>(function: &str, value: Value<'v>) -> starlark::Result<&'v GeoPoint> {
    value
        .downcast_ref::<GeoPoint>()
        .ok_or_else(|| error(function, format!("got {}, want Point", value.get_type())))
}

#[starlark_module]
fn point_methods(builder: &mut MethodsBuilder) {
    /// The first coordinate (starlib's `x`, also named `lat`).
    #[starlark(attribute)]
    fn x(this: Value) -> starlark::Result<f64> {
        Ok(point_of("Point.x", this)?.x)
    }

    /// The first coordinate, as starlib names it.
    #[starlark(attribute)]
    fn lat(this: Value) -> starlark::Result<f64> {
        Ok(point_of("Point.lat", this)?.x)
    }

    /// The second coordinate (starlib's `y`, also named `lng`).
    #[starlark(attribute)]
    fn y(this: Value) -> starlark::Result<f64> {
        Ok(point_of("Point.y", this)?.y)
    }

    /// The second coordinate, as starlib names it.
    #[starlark(attribute)]
    fn lng(this: Value) -> starlark::Result<f64> {
        Ok(point_of("Point.lng", this)?.y)
    }

    /// Euclidean distance to `p2`.
    fn distance<'v>(this: Value<'v>, p2: Value<'v>) -> starlark::Result<f64> {
        let a = point_of("distance", this)?;
        let b = point_of("distance: for parameter p2", p2)?;
        Ok(planar_distance([a.x, a.y], [b.x, b.y]))
    }

    /// Distance to `p2` in metres over the Earth's surface, x being the longitude and y the
    /// latitude, as orb approximates it.
    #[allow(non_snake_case)]
    fn distanceGeodesic<'v>(this: Value<'v>, p2: Value<'v>) -> starlark::Result<f64> {
        let a = point_of("distanceGeodesic", this)?;
        let b = point_of("distanceGeodesic: for parameter p2", p2)?;
        Ok(geodesic_distance([a.x, a.y], [b.x, b.y]))
    }

    /// Not implemented by starlib v0.5.0 either: always an error, as there.
    fn buffer<'v>(
        #[starlark(this)] _this: Value<'v>,
        #[starlark(args)] _args: UnpackTuple<Value<'v>>,
    ) -> starlark::Result<Value<'v>> {
        Err(error("buffer", "not yet implemented: buffer"))
    }

    /// Not implemented by starlib v0.5.0 either: always an error, as there.
    #[allow(non_snake_case)]
    fn KNN<'v>(
        #[starlark(this)] _this: Value<'v>,
        #[starlark(args)] _args: UnpackTuple<Value<'v>>,
    ) -> starlark::Result<Value<'v>> {
        Err(error("KNN", "not yet implemented: knn"))
    }
}

#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct GeoLine(#[allocative(skip)] Ring);

starlark_simple_value!(GeoLine);

impl fmt::Display for GeoLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for &[x, y] in self.0.iter() {
            write!(f, "{} ", GeoPoint { x, y })?;
        }
        f.write_str("]")
    }
}

static LINE_METHODS: MethodsStatic = MethodsStatic::new("krm-geo-line", line_methods);

#[starlark_value(type = "Line")]
impl<'v> StarlarkValue<'v> for GeoLine {
    fn get_methods() -> Option<&'static Methods> {
        Some(LINE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }

    fn length(&self) -> starlark::Result<i32> {
        i32::try_from(self.0.len()).map_err(|_| error("Line", "too many points for len()"))
    }

    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let [x, y] = self.0[position("Line", index, self.0.len())?];
        Ok(heap.alloc_simple(GeoPoint { x, y }))
    }

    fn iterate_collect(&self, heap: Heap<'v>) -> starlark::Result<Vec<Value<'v>>> {
        let bytes = (self.0.len() as u64).saturating_mul(POINT_VALUE_BYTES + 8);
        let left = heap_left(heap);
        if bytes > left {
            return Err(over_budget("iterating a `Line`", Some(bytes), left));
        }
        Ok(self
            .0
            .iter()
            .map(|&[x, y]| heap.alloc_simple(GeoPoint { x, y }))
            .collect())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<GeoLine>()
            .is_some_and(|o| o.0 == self.0))
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        hash_pairs(&self.0, hasher);
        Ok(())
    }
}

fn line_of<'v>(function: &str, value: Value<'v>) -> starlark::Result<&'v GeoLine> {
    value
        .downcast_ref::<GeoLine>()
        .ok_or_else(|| error(function, format!("got {}, want Line", value.get_type())))
}

#[starlark_module]
fn line_methods(builder: &mut MethodsBuilder) {
    /// Euclidean length.
    fn length(this: Value) -> starlark::Result<f64> {
        Ok(total_length(&line_of("length", this)?.0, planar_distance))
    }

    /// Length in metres over the Earth's surface, as orb approximates it.
    #[allow(non_snake_case)]
    fn lengthGeodesic(this: Value) -> starlark::Result<f64> {
        Ok(total_length(
            &line_of("lengthGeodesic", this)?.0,
            geodesic_distance,
        ))
    }

    /// Not implemented by starlib v0.5.0 either: always an error, as there.
    fn buffer<'v>(
        #[starlark(this)] _this: Value<'v>,
        #[starlark(args)] _args: UnpackTuple<Value<'v>>,
    ) -> starlark::Result<Value<'v>> {
        Err(error("buffer", "not yet implemented: buffer"))
    }
}

/// A polygon: its outer ring, then its holes.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct GeoPolygon(#[allocative(skip)] Rings);

starlark_simple_value!(GeoPolygon);

impl fmt::Display for GeoPolygon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "polygon {} rings", self.0.len())
    }
}

#[starlark_value(type = "Polygon")]
impl<'v> StarlarkValue<'v> for GeoPolygon {
    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }

    fn length(&self) -> starlark::Result<i32> {
        i32::try_from(self.0.len()).map_err(|_| error("Polygon", "too many rings for len()"))
    }

    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let ring = &self.0[position("Polygon", index, self.0.len())?];
        Ok(heap.alloc_simple(GeoLine(ring.clone())))
    }

    fn iterate_collect(&self, heap: Heap<'v>) -> starlark::Result<Vec<Value<'v>>> {
        Ok(self
            .0
            .iter()
            .map(|ring| heap.alloc_simple(GeoLine(ring.clone())))
            .collect())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<GeoPolygon>()
            .is_some_and(|o| o.0 == self.0))
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        for ring in self.0.iter() {
            hash_pairs(ring, hasher);
        }
        Ok(())
    }
}

#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct GeoMultiPolygon(#[allocative(skip)] Arc<[Rings]>);

starlark_simple_value!(GeoMultiPolygon);

impl fmt::Display for GeoMultiPolygon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "multi polygon {} polygons", self.0.len())
    }
}

#[starlark_value(type = "MultiPolygon")]
impl<'v> StarlarkValue<'v> for GeoMultiPolygon {
    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }

    fn length(&self) -> starlark::Result<i32> {
        i32::try_from(self.0.len())
            .map_err(|_| error("MultiPolygon", "too many polygons for len()"))
    }

    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let rings = &self.0[position("MultiPolygon", index, self.0.len())?];
        Ok(heap.alloc_simple(GeoPolygon(rings.clone())))
    }

    fn iterate_collect(&self, heap: Heap<'v>) -> starlark::Result<Vec<Value<'v>>> {
        Ok(self
            .0
            .iter()
            .map(|rings| heap.alloc_simple(GeoPolygon(rings.clone())))
            .collect())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<GeoMultiPolygon>()
            .is_some_and(|o| o.0 == self.0))
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        for ring in self.0.iter().flat_map(|rings| rings.iter()) {
            hash_pairs(ring, hasher);
        }
        Ok(())
    }
}

/// A Line made from a list argument, measured first.
fn new_line(function: &str, items: &[Value], heap: Heap) -> starlark::Result<Ring> {
    reserve(
        &format!("`geo.{function}` of {} points", items.len()),
        (items.len() as u64).saturating_mul(PAIR_BYTES) + PART_BYTES,
        heap,
    )?;
    Ok(pairs_of(function, items)?.into())
}

/// A GeoJSON position's first two coordinates (a third, the altitude, is dropped as orb does).
fn geojson_pair(index: usize, position: &serde_json::Value) -> starlark::Result<Pair> {
    match position.as_array().map(Vec::as_slice) {
        Some([x, y, ..]) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => Ok([x, y]),
            _ => Err(error(
                "parseGeoJSON",
                format!("feature {index}: a position holds something other than numbers"),
            )),
        },
        _ => Err(error(
            "parseGeoJSON",
            format!("feature {index}: a position must be an array of 2 or more numbers"),
        )),
    }
}

fn geojson_ring(
    index: usize,
    positions: &serde_json::Value,
    held: &mut u64,
) -> starlark::Result<Ring> {
    let positions = positions.as_array().ok_or_else(|| {
        error(
            "parseGeoJSON",
            format!("feature {index}: coordinates must be arrays of positions"),
        )
    })?;
    *held += positions.len() as u64 * PAIR_BYTES + PART_BYTES;
    positions.iter().map(|p| geojson_pair(index, p)).collect()
}

/// The feature's geometry as starlib makes it: Point, LineString and Polygon only. The JSON is
/// walked here rather than by the geojson crate: its flattened fields cannot take the
/// workspace's arbitrary-precision numbers.
fn from_geojson<'v>(
    index: usize,
    feature: &serde_json::Value,
    held: &mut u64,
    heap: Heap<'v>,
) -> starlark::Result<Value<'v>> {
    let function = "parseGeoJSON";
    let geometry = &feature["geometry"];
    if geometry.is_null() {
        return Err(error(function, format!("feature {index} has no geometry")));
    }
    let coordinates = &geometry["coordinates"];
    match geometry["type"].as_str() {
        Some("Point") => {
            let [x, y] = geojson_pair(index, coordinates)?;
            Ok(heap.alloc_simple(GeoPoint { x, y }))
        }
        Some("LineString") => {
            Ok(heap.alloc_simple(GeoLine(geojson_ring(index, coordinates, held)?)))
        }
        Some("Polygon") => {
            let rings = coordinates.as_array().ok_or_else(|| {
                error(
                    function,
                    format!("feature {index}: a Polygon's coordinates must be an array of rings"),
                )
            })?;
            *held += PART_BYTES;
            let rings = rings
                .iter()
                .map(|ring| geojson_ring(index, ring, held))
                .collect::<starlark::Result<Rings>>()?;
            Ok(heap.alloc_simple(GeoPolygon(rings)))
        }
        Some(kind @ ("MultiPoint" | "MultiLineString" | "MultiPolygon" | "GeometryCollection")) => {
            Err(error(
                function,
                format!("unrecognized geoJSON type: {kind}"),
            ))
        }
        Some(other) => Err(error(
            function,
            format!("feature {index}: {other:?} is not a GeoJSON geometry type"),
        )),
        None => Err(error(
            function,
            format!("feature {index}: its geometry has no type"),
        )),
    }
}

/// Feature properties as starlib's `util.Marshal` makes them: JSON numbers become floats.
fn from_json<'v>(value: &serde_json::Value, heap: Heap<'v>) -> Value<'v> {
    match value {
        serde_json::Value::Null => Value::new_none(),
        serde_json::Value::Bool(b) => Value::new_bool(*b),
        serde_json::Value::Number(n) => heap.alloc(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => heap.alloc(s.as_str()),
        serde_json::Value::Array(items) => {
            heap.alloc(AllocList(items.iter().map(|item| from_json(item, heap))))
        }
        serde_json::Value::Object(members) => heap.alloc(AllocDict(
            members
                .iter()
                .map(|(key, item)| (key.as_str(), from_json(item, heap))),
        )),
    }
}

#[starlark_module]
fn geo_module(builder: &mut GlobalsBuilder) {
    /// A point: x (the longitude in geodesic space) and y (the latitude), ints or floats.
    #[allow(non_snake_case)]
    fn Point<'v>(x: Value<'v>, y: Value<'v>) -> starlark::Result<GeoPoint> {
        Ok(GeoPoint {
            x: number("Point", x)?,
            y: number("Point", y)?,
        })
    }

    /// A line through `points`, a list of Points or of two-number lists.
    #[allow(non_snake_case)]
    fn Line<'v>(points: Value<'v>, heap: Heap<'v>) -> starlark::Result<GeoLine> {
        let items = list_argument("Line", "points", points)?;
        Ok(GeoLine(new_line("Line", items, heap)?))
    }

    /// A polygon of closed `rings` (Lines, or lists as `Line` takes): the outer boundary,
    /// then the holes.
    #[allow(non_snake_case)]
    fn Polygon<'v>(rings: Value<'v>, heap: Heap<'v>) -> starlark::Result<GeoPolygon> {
        let function = "Polygon";
        let items = list_argument(function, "rings", rings)?;
        reserve(
            &format!("`geo.Polygon` of {} rings", items.len()),
            (items.len() as u64).saturating_mul(PART_BYTES),
            heap,
        )?;
        let rings = items
            .iter()
            .enumerate()
            .map(|(i, &item)| {
                let ring = if let Some(line) = item.downcast_ref::<GeoLine>() {
                    line.0.clone()
                } else if let Some(list) = ListRef::from_value(item) {
                    new_line(function, list.content(), heap)?
                } else {
                    return Err(error(
                        function,
                        format!("invalid type for creating polygon: {}", item.get_type()),
                    ));
                };
                if !is_closed(&ring) {
                    return Err(error(function, format!("line {i} is not closed")));
                }
                Ok(ring)
            })
            .collect::<starlark::Result<Rings>>()?;
        Ok(GeoPolygon(rings))
    }

    /// A group of `polygons` (Polygon values) that behaves as one polygon.
    #[allow(non_snake_case)]
    fn MultiPolygon<'v>(polygons: Value<'v>, heap: Heap<'v>) -> starlark::Result<GeoMultiPolygon> {
        let function = "MultiPolygon";
        let items = list_argument(function, "polygons", polygons)?;
        reserve(
            &format!("`geo.MultiPolygon` of {} polygons", items.len()),
            (items.len() as u64).saturating_mul(PART_BYTES),
            heap,
        )?;
        let polygons = items
            .iter()
            .map(|&item| {
                item.downcast_ref::<GeoPolygon>()
                    .map(|polygon| polygon.0.clone())
                    .ok_or_else(|| {
                        error(
                            function,
                            format!(
                                "invalid type for creating MultiPolygon: {}",
                                item.get_type()
                            ),
                        )
                    })
            })
            .collect::<starlark::Result<Arc<[Rings]>>>()?;
        Ok(GeoMultiPolygon(polygons))
    }

    /// Whether `a` (a Point or a Line) lies in `b` (a Polygon or MultiPolygon), boundary
    /// included. For a Line, starlib v0.5.0 decides by the line's first point alone, and so
    /// does this: the catalog's programs get the same answers.
    fn within<'v>(a: Value<'v>, b: Value<'v>) -> starlark::Result<bool> {
        let function = "within";
        let polygons: Vec<&[Ring]> = if let Some(polygon) = b.downcast_ref::<GeoPolygon>() {
            vec![&polygon.0[..]]
        } else if let Some(multi) = b.downcast_ref::<GeoMultiPolygon>() {
            multi.0.iter().map(|rings| &rings[..]).collect()
        } else {
            return Err(error(
                function,
                format!(
                    "within b value must be either a Polygon or Multipolygon. got: {}",
                    b.get_type()
                ),
            ));
        };
        let point = if let Some(point) = a.downcast_ref::<GeoPoint>() {
            [point.x, point.y]
        } else if let Some(line) = a.downcast_ref::<GeoLine>() {
            *line
                .0
                .first()
                .ok_or_else(|| error(function, "the line has no points"))?
        } else if a.downcast_ref::<GeoPolygon>().is_some() {
            return Err(error(
                function,
                "checking polygons-within-polygons is not yet supported",
            ));
        } else {
            return Err(error(
                function,
                format!("unrecognized type: {}", a.get_type()),
            ));
        };
        let coord = geo::Coord {
            x: point[0],
            y: point[1],
        };
        Ok(polygons.iter().any(|rings| polygon_holds(rings, coord)))
    }

    /// Not finished in starlib v0.5.0: always an error, as there.
    fn intersects<'v>(
        #[starlark(args)] _args: UnpackTuple<Value<'v>>,
    ) -> starlark::Result<Value<'v>> {
        Err(error("intersects", "not finished: intersects"))
    }

    /// A GeoJSON FeatureCollection's features as `(geometries, properties)`: two lists of
    /// equal length, the geometries Points, Lines and Polygons, the properties dicts.
    #[allow(non_snake_case)]
    fn parseGeoJSON<'v>(data: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let function = "parseGeoJSON";
        let text = data
            .unpack_str()
            .ok_or_else(|| error(function, "invalid argument type, expected string"))?;
        let most = (text.len() as u64).saturating_mul(GEOJSON_BYTES_PER_BYTE);
        let left = heap_left(heap);
        if most > left {
            return Err(over_budget(
                &format!("`geo.parseGeoJSON` of {} bytes", text.len()),
                Some(most),
                left,
            ));
        }
        let document: serde_json::Value =
            serde_json::from_str(text).map_err(|e| error(function, format!("not GeoJSON: {e}")))?;
        let features = match (&document["type"], &document["features"]) {
            (serde_json::Value::String(kind), serde_json::Value::Array(features))
                if kind == "FeatureCollection" =>
            {
                features
            }
            _ => return Err(error(function, "not a GeoJSON FeatureCollection")),
        };
        let mut held = 0;
        let geometries = features
            .iter()
            .enumerate()
            .map(|(i, feature)| from_geojson(i, feature, &mut held, heap))
            .collect::<starlark::Result<Vec<_>>>()?;
        hold_outside_heap(held);
        let properties = features
            .iter()
            .enumerate()
            .map(|(i, feature)| match &feature["properties"] {
                serde_json::Value::Object(members) => Ok(heap.alloc(AllocDict(
                    members
                        .iter()
                        .map(|(key, item)| (key.as_str(), from_json(item, heap))),
                ))),
                serde_json::Value::Null => Ok(heap.alloc(AllocDict::EMPTY)),
                _ => Err(error(
                    function,
                    format!("feature {i}: properties must be an object or null"),
                )),
            })
            .collect::<starlark::Result<Vec<Value>>>()?;
        Ok(heap.alloc(AllocTuple([
            heap.alloc(AllocList(geometries)),
            heap.alloc(AllocList(properties)),
        ])))
    }
}
