// The figures the docs quote come from a generated record or from the code, checked here:
//   - autograd.md: the printed graph and the printed y and x.grad of the worked example are what
//     the snippets on the page print;
//   - attention_costs.md §1: the exp() and GEMM GFLOP table is the record results/runs/bench_table3;
//     §2: every GFLOP figure of the Figure 1 paragraphs is in a bench record, and the
//     deit_tiny_patch4_28 shape's two figures are what the GEMM counter counts;
//   - models.md §5: both parameter columns of every registered model, and every config row.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/flops.h"
#include "core/ops.h"
#include "models/registry.h"
#include "nn/attention/attention.h"
#include "testing.h"

using namespace sima;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kRoot(SIMA_SOURCE_DIR);

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Block {
  std::string lang, text;
};

// The fenced blocks of a Markdown page, in order.
std::vector<Block> fenced_blocks(const std::string& md) {
  std::vector<Block> out;
  std::istringstream in(md);
  bool inside = false;
  Block cur;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find_first_not_of(' ');
    const bool fence = a != std::string::npos && line.compare(a, 3, "```") == 0;
    if (fence && !inside) {
      inside = true;
      cur = Block{line.substr(a + 3), ""};
    } else if (fence) {
      inside = false;
      out.push_back(cur);
    } else if (inside) {
      cur.text += line + "\n";
    }
  }
  return out;
}

// The rows of the Markdown table whose header line is `header`, split into trimmed cells.
std::vector<std::vector<std::string>> table_rows(const std::string& md, const std::string& header) {
  const size_t at = md.find(header + "\n");
  REQUIRE_MESSAGE(at != std::string::npos, "no table with header " << header);
  std::istringstream in(md.substr(at));
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  std::getline(in, line);  // |---|
  while (std::getline(in, line) && !line.empty() && line[0] == '|') {
    std::vector<std::string> cells;
    std::stringstream ls(line.substr(1));
    for (std::string c; std::getline(ls, c, '|');) {
      const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

std::string gflop4(double g) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", g);
  return buf;
}

int64_t parse_count(std::string s) {  // "5,353,738" -> 5353738
  std::string digits;
  for (char c : s)
    if (c != ',') digits += c;
  return std::stoll(digits);
}

std::string unquote(const std::string& s) {  // "`name`" -> "name"
  return s.size() >= 2 && s.front() == '`' && s.back() == '`' ? s.substr(1, s.size() - 2) : s;
}

// autograd.md §3's print_graph, writing into a string instead of stdout.
void print_graph(const Node* n, int depth, std::string& out) {
  out += std::string(2 * depth, ' ') + n->name + "\n";
  for (const Edge& e : n->next) {
    if (e.node) print_graph(e.node.get(), depth + 1, out);
    else if (e.leaf) out += std::string(2 * depth + 2, ' ') + "leaf " + e.shape.str() + "\n";
  }
}

}  // namespace

TEST_CASE("autograd.md: the worked example prints what the page shows") {
  const std::vector<Block> blocks = fenced_blocks(read_text(kRoot / "docs" / "autograd.md"));
  Tensor x = from_vector({-1.f, 0.5f, 2.f}).requires_grad_();
  Tensor y = sum(add(mul(x, x), x));
  std::string graph;
  print_graph(y.grad_fn().get(), 0, graph);
  y.backward();
  const std::string values = "y = " + y.str() + "\nx.grad = " + x.grad().str() + "\n";

  int graph_blocks = 0, value_blocks = 0;
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    const std::string& code = blocks[i].text;
    if (blocks[i].lang != "cpp") continue;
    if (code.find("void print_graph") != std::string::npos) {
      CHECK(code.find("Tensor x = from_vector({-1.f, 0.5f, 2.f}).requires_grad_();") != std::string::npos);
      CHECK(code.find("Tensor y = sum(add(mul(x, x), x));") != std::string::npos);
      CHECK(blocks[i + 1].lang == "text");
      CHECK(blocks[i + 1].text == graph);
      ++graph_blocks;
    }
    if (code.find("std::cout << \"y = \" << y << \"\\nx.grad = \" << x.grad()") != std::string::npos) {
      CHECK(blocks[i + 1].lang == "text");
      CHECK(blocks[i + 1].text == values);
      ++value_blocks;
    }
  }
  MESSAGE("graph:\n" << graph << "values:\n" << values);
  CHECK(graph_blocks == 1);
  CHECK(value_blocks == 1);
}

TEST_CASE("attention_costs.md §1: the exp() and GFLOP table is the Table 3 record, row for row") {
  const std::string md = read_text(kRoot / "docs" / "attention_costs.md");
  const json rec = json::parse(read_text(kRoot / "results" / "runs" / "bench_table3" / "s0.json"));
  std::multiset<std::string> from_record, from_doc;
  for (const json& r : rec.at("bench"))
    from_record.insert(std::to_string(r.at("tokens").get<int64_t>()) + "|" + std::to_string(r.at("dim").get<int64_t>()) +
                       "|" + std::to_string(r.at("heads").get<int64_t>()) + "|" + r.at("variant").get<std::string>() +
                       "|" + r.value("order", std::string()) + "|" +
                       std::to_string(r.at("exp_calls").get<int64_t>()) + "|" + gflop4(r.at("gemm_gflop").get<double>()));
  for (const auto& c : table_rows(md, "| N | C | heads | variant | order | exp() calls | GEMM GFLOP |")) {
    REQUIRE(c.size() >= 7);
    from_doc.insert(c[0] + "|" + c[1] + "|" + c[2] + "|" + c[3] + "|" + c[4] + "|" + c[5] + "|" + c[6]);
  }
  CHECK(from_record.size() == 24);  // 2 shapes x (11 variants + SimA in a second order)
  CHECK(from_doc == from_record);
}

TEST_CASE("attention_costs.md §2: the GFLOP figures are in the bench records or counted here") {
  const std::string md = read_text(kRoot / "docs" / "attention_costs.md");
  std::set<std::string> recorded;
  for (const char* run : {"bench_table3", "bench_table3_head", "bench_fig1_tokens", "bench_fig1_dim"}) {
    const json rec = json::parse(read_text(kRoot / "results" / "runs" / run / "s0.json"));
    for (const json& r : rec.at("bench")) recorded.insert(gflop4(r.at("gemm_gflop").get<double>()));
  }
  CHECK(recorded.size() >= 20);

  const size_t a = md.find("### The Figure 1 trend"), b = md.find("The same holds at the shape of");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  const std::string fig1 = md.substr(a, b - a);
  const std::regex four_decimals(R"(\b\d+\.\d{4}\b)");
  int n = 0;
  for (auto it = std::sregex_iterator(fig1.begin(), fig1.end(), four_decimals); it != std::sregex_iterator(); ++it, ++n)
    CHECK_MESSAGE(recorded.count(it->str()), it->str() << " GFLOP is in no bench record");
  CHECK(n >= 8);

  // deit_tiny_patch4_28_sima's block shape: B 64, N 50, C 192, h 3.
  const std::string rest = md.substr(b, 600);
  std::smatch m;
  REQUIRE(std::regex_search(rest, m, std::regex(R"((\d+\.\d{4}) GFLOP for qk_first against (\d+\.\d{4}) for kv_first)")));
  Tensor x = randn({64, 50, 192});
  NoGradGuard no_grad;
  std::vector<std::string> counted;
  for (const char* order : {"qk_first", "kv_first"}) {
    AttentionOptions o;
    o.variant = "sima";
    o.dim = 192;
    o.num_heads = 3;
    o.with("order", order);
    auto attn = make_attention(o);
    const int64_t before = gemm_flops();
    attn->forward(x);
    counted.push_back(gflop4((gemm_flops() - before) * 1e-9));
  }
  CHECK(m[1].str() == counted[0]);
  CHECK(m[2].str() == counted[1]);
}

TEST_CASE("models.md §5: every parameter count, registered models and configs") {
  const std::string md = read_text(kRoot / "docs" / "models.md");
  std::set<std::string> listed;
  for (const auto& c : table_rows(md, "| model | parameters | `_sima` twin | note |")) {
    REQUIRE(c.size() >= 3);
    const std::string name = unquote(c[0]);
    CAPTURE(name);
    listed.insert(name);
    CHECK(create_model(name)->num_parameters() == parse_count(c[1]));
    CHECK(create_model(name + "_sima")->num_parameters() == parse_count(c[2]));
  }
  for (const std::string& name : model_names())
    if (name.size() < 5 || name.substr(name.size() - 5) != "_sima") CHECK_MESSAGE(listed.count(name), name << " is not in the table");

  int configs = 0;
  for (const auto& c : table_rows(md, "| config | model | parameters |")) {
    REQUIRE(c.size() >= 3);
    std::stringstream files(c[0]);
    for (std::string f; std::getline(files, f, ',');) {
      f = unquote(f.substr(f.find('`')));
      if (f.rfind("configs/", 0) != 0) f = "configs/" + f;
      CAPTURE(f);
      const json j = json::parse(read_text(kRoot / f), nullptr, true, true);
      CHECK(create_model(config_from_json(j.at("model")))->num_parameters() == parse_count(c[2]));
      ++configs;
    }
  }
  CHECK(configs >= 10);
}
