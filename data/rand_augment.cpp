// timm's RandAugment: the config parser, the op sets, the level -> argument maps, and the
// per-image sampling (see rand_augment.h for the conventions).
#include "data/rand_augment.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace sima {

namespace {

// Parses all of `s` as a T (int or double); false on anything left over.
template <class T>
bool parse_number(const std::string& s, T& out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

RandAugmentConfig parse_rand_augment(const std::string& config) {
  const std::string where = "rand_augment: config '" + config + "'";
  std::vector<std::string> sections;
  size_t start = 0;
  while (true) {
    const size_t dash = config.find('-', start);
    sections.push_back(config.substr(start, dash == std::string::npos ? std::string::npos : dash - start));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  check(sections[0] == "rand", where, " must start with 'rand' (e.g. 'rand-m9-mstd0.5-inc1')");
  RandAugmentConfig c;
  bool magnitude_given = false;
  for (size_t i = 1; i < sections.size(); ++i) {
    const std::string& s = sections[i];
    check(!s.empty(), where, ": empty section ", i);
    // key = the letters before the first digit, value = the rest (timm's re.split(r'(\d.*)'))
    const size_t digit = s.find_first_of("0123456789");
    check(digit != std::string::npos && digit > 0, where, ": section '", s, "' is not <key><number>");
    const std::string key = s.substr(0, digit), value = s.substr(digit);
    auto bad_value = [&](const char* expected) { fail(where, ": section '", s, "': ", expected); };
    if (key == "m") {
      if (!parse_number(value, c.magnitude)) bad_value("magnitude must be an integer");
      magnitude_given = true;
    } else if (key == "n") {
      if (!parse_number(value, c.num_layers) || c.num_layers > 64)
        bad_value("ops per image must be an integer in 0..64");
    } else if (key == "mstd") {
      if (!parse_number(value, c.magnitude_std) || !std::isfinite(c.magnitude_std))
        bad_value("magnitude std must be a non-negative number");
      if (c.magnitude_std > 100) c.magnitude_std = std::numeric_limits<double>::infinity();  // timm: uniform
    } else if (key == "mmax") {
      if (!parse_number(value, c.magnitude_max) || c.magnitude_max < 1 || c.magnitude_max > 100)
        bad_value("magnitude max must be an integer in 1..100");
    } else if (key == "inc") {
      int inc = 0;
      if (!parse_number(value, inc) || (inc != 0 && inc != 1)) bad_value("inc must be 0 or 1");
      c.increasing = inc == 1;
    } else if (key == "w") {
      fail(where, ": weighted op choice ('", s, "') is not supported");
    } else {
      fail(where, ": unknown section '", s, "' (expected m, n, mstd, mmax or inc)");
    }
  }
  if (!magnitude_given) c.magnitude = 10;  // timm's default magnitude is _LEVEL_DENOM
  check(c.magnitude >= 0 && c.magnitude <= c.magnitude_max, where, ": magnitude ", c.magnitude, " is not in 0..",
        c.magnitude_max);
  return c;
}

const char* rand_augment_op_name(RandAugmentOp op) {
  switch (op) {
    case RandAugmentOp::AutoContrast: return "AutoContrast";
    case RandAugmentOp::Equalize: return "Equalize";
    case RandAugmentOp::Invert: return "Invert";
    case RandAugmentOp::Rotate: return "Rotate";
    case RandAugmentOp::Posterize: return "Posterize";
    case RandAugmentOp::PosterizeIncreasing: return "PosterizeIncreasing";
    case RandAugmentOp::Solarize: return "Solarize";
    case RandAugmentOp::SolarizeIncreasing: return "SolarizeIncreasing";
    case RandAugmentOp::SolarizeAdd: return "SolarizeAdd";
    case RandAugmentOp::Color: return "Color";
    case RandAugmentOp::ColorIncreasing: return "ColorIncreasing";
    case RandAugmentOp::Contrast: return "Contrast";
    case RandAugmentOp::ContrastIncreasing: return "ContrastIncreasing";
    case RandAugmentOp::Brightness: return "Brightness";
    case RandAugmentOp::BrightnessIncreasing: return "BrightnessIncreasing";
    case RandAugmentOp::Sharpness: return "Sharpness";
    case RandAugmentOp::SharpnessIncreasing: return "SharpnessIncreasing";
    case RandAugmentOp::ShearX: return "ShearX";
    case RandAugmentOp::ShearY: return "ShearY";
    case RandAugmentOp::TranslateXRel: return "TranslateXRel";
    case RandAugmentOp::TranslateYRel: return "TranslateYRel";
  }
  return "?";
}

std::vector<RandAugmentOp> rand_augment_ops(bool increasing) {
  using O = RandAugmentOp;
  if (increasing)
    return {O::AutoContrast,       O::Equalize,           O::Invert,          O::Rotate,
            O::PosterizeIncreasing, O::SolarizeIncreasing, O::SolarizeAdd,     O::ColorIncreasing,
            O::ContrastIncreasing,  O::BrightnessIncreasing, O::SharpnessIncreasing, O::ShearX,
            O::ShearY,              O::TranslateXRel,      O::TranslateYRel};
  return {O::AutoContrast, O::Equalize, O::Invert,    O::Rotate,     O::Posterize,
          O::Solarize,     O::SolarizeAdd, O::Color,  O::Contrast,   O::Brightness,
          O::Sharpness,    O::ShearX,   O::ShearY,    O::TranslateXRel, O::TranslateYRel};
}

std::vector<uint8_t> fill_from_mean(const std::vector<float>& mean) {
  std::vector<uint8_t> fill;
  for (float m : mean) {
    check(std::isfinite(m) && m >= 0.f, "fill_from_mean: mean ", m, " must be a non-negative number");
    fill.push_back(static_cast<uint8_t>(std::min(255.0, std::nearbyint(255.0 * m))));
  }
  return fill;
}

RandAugment::RandAugment(const RandAugmentConfig& config, const RandAugmentOptions& options)
    : config_(config), options_(options), ops_(rand_augment_ops(config.increasing)) {
  check(config.num_layers >= 0 && config.magnitude >= 0 && config.magnitude_max > 0 &&
            config.magnitude <= config.magnitude_max && config.magnitude_std >= 0,
        "rand_augment: invalid config (m", config.magnitude, ", n", config.num_layers, ", mstd", config.magnitude_std,
        ", mmax", config.magnitude_max, ")");
  check(options.fill.size() == 1 || options.fill.size() == 3, "rand_augment: fill has ", options.fill.size(),
        " values, expected 1 or 3");
  check(options.prob >= 0.0 && options.prob <= 1.0, "rand_augment: probability ", options.prob, " is not in [0, 1]");
  check(std::isfinite(options.translate_pct) && options.translate_pct >= 0.0, "rand_augment: translate_pct ",
        options.translate_pct, " must be non-negative");
}

pil::Image8 RandAugment::apply(RandAugmentOp op, const pil::Image8& img, double magnitude, bool negate,
                               pil::Resample resample) const {
  using O = RandAugmentOp;
  const double level = magnitude / 10.0;  // timm's _LEVEL_DENOM
  const double sign = negate ? -1.0 : 1.0;
  // the fill, per channel; a grey image gets the grey of an RGB fill (PIL's L conversion)
  std::vector<uint8_t> fill = options_.fill;
  if (img.channels == 1 && fill.size() == 3)
    fill = {static_cast<uint8_t>((fill[0] * 19595 + fill[1] * 38470 + fill[2] * 7471 + 0x8000) >> 16)};
  auto enhance = [&] { return static_cast<float>(level * 1.8 + 0.1); };
  auto enhance_increasing = [&] { return static_cast<float>(std::max(0.1, 1.0 + sign * level * 0.9)); };
  const int posterize_bits = static_cast<int>(level * 4);
  const int solarize_threshold = static_cast<int>(level * 256);
  switch (op) {
    case O::AutoContrast: return pil::autocontrast(img);
    case O::Equalize: return pil::equalize(img);
    case O::Invert: return pil::invert(img);
    case O::Rotate: return pil::rotate(img, sign * level * 30.0, resample, fill);
    case O::Posterize: return pil::posterize(img, posterize_bits);
    case O::PosterizeIncreasing: return pil::posterize(img, 4 - posterize_bits);
    case O::Solarize: return pil::solarize(img, solarize_threshold);
    case O::SolarizeIncreasing: return pil::solarize(img, 256 - solarize_threshold);
    case O::SolarizeAdd: return pil::solarize_add(img, static_cast<int>(level * 110), 128);
    case O::Color: return pil::enhance_color(img, enhance());
    case O::ColorIncreasing: return pil::enhance_color(img, enhance_increasing());
    case O::Contrast: return pil::enhance_contrast(img, enhance());
    case O::ContrastIncreasing: return pil::enhance_contrast(img, enhance_increasing());
    case O::Brightness: return pil::enhance_brightness(img, enhance());
    case O::BrightnessIncreasing: return pil::enhance_brightness(img, enhance_increasing());
    case O::Sharpness: return pil::enhance_sharpness(img, enhance());
    case O::SharpnessIncreasing: return pil::enhance_sharpness(img, enhance_increasing());
    // Image.transform(AFFINE, (a, b, c, d, e, f)): input = (a·x + b·y + c, d·x + e·y + f)
    case O::ShearX: return pil::affine(img, {1, sign * level * 0.3, 0, 0, 1, 0}, resample, fill);
    case O::ShearY: return pil::affine(img, {1, 0, 0, sign * level * 0.3, 1, 0}, resample, fill);
    case O::TranslateXRel: {
      const double pixels = sign * level * options_.translate_pct * static_cast<double>(img.width);
      return pil::affine(img, {1, 0, pixels, 0, 1, 0}, resample, fill);
    }
    case O::TranslateYRel: {
      const double pixels = sign * level * options_.translate_pct * static_cast<double>(img.height);
      return pil::affine(img, {1, 0, 0, 0, 1, pixels}, resample, fill);
    }
  }
  return img;
}

Image RandAugment::operator()(Image img, Generator& gen) const {
  pil::Image8 im = pil::to_uint8(img);
  // np.random.choice(ops, n, replace=True): the n ops first, then each one in turn
  std::vector<RandAugmentOp> chosen(config_.num_layers);
  for (auto& op : chosen) op = ops_[gen.randint(ops_.size())];
  for (RandAugmentOp op : chosen) {
    if (gen.uniform_double() > options_.prob) continue;  // AugmentOp: random() > prob skips
    double m = config_.magnitude;
    if (std::isinf(config_.magnitude_std)) m = m * gen.uniform_double();
    else if (config_.magnitude_std > 0) m = m + config_.magnitude_std * gen.normal();
    m = std::clamp(m, 0.0, static_cast<double>(config_.magnitude_max));
    // the signed level functions draw the sign (random() > 0.5 negates)
    bool negate = false;
    switch (op) {
      case RandAugmentOp::Rotate: case RandAugmentOp::ShearX: case RandAugmentOp::ShearY:
      case RandAugmentOp::TranslateXRel: case RandAugmentOp::TranslateYRel:
      case RandAugmentOp::ColorIncreasing: case RandAugmentOp::ContrastIncreasing:
      case RandAugmentOp::BrightnessIncreasing: case RandAugmentOp::SharpnessIncreasing:
        negate = gen.uniform_double() > 0.5;
        break;
      default: break;
    }
    // geometric ops pick their resampling filter (timm's _interpolation)
    pil::Resample resample = options_.interpolation;
    const bool geometric = op == RandAugmentOp::Rotate || op == RandAugmentOp::ShearX || op == RandAugmentOp::ShearY ||
                           op == RandAugmentOp::TranslateXRel || op == RandAugmentOp::TranslateYRel;
    if (geometric && options_.random_interpolation)
      resample = gen.randint(2) == 0 ? pil::Resample::Bilinear : pil::Resample::Bicubic;
    im = apply(op, im, m, negate, resample);
  }
  return pil::from_uint8(im);
}

Transform RandAugment::transform() const {
  return [ra = *this](Image img, Generator& gen) { return ra(std::move(img), gen); };
}

}  // namespace sima
