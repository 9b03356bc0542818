// DistributedEnv from torchrun's or Slurm's variables (see distributed_env.h).
#include "executor/comm/distributed_env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include "base/user_error.h"

extern char** environ;

namespace llmplan::executor {
namespace {

std::optional<std::string> Lookup(const std::map<std::string, std::string>& vars, const std::string& name) {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

// A whole decimal integer or a UserError naming the variable.
int ParseInt(const std::string& name, const std::string& value) {
  if (value.empty()) throw UserError(name + " is set but empty; expected a whole number");
  errno = 0;
  char* end = nullptr;
  const long parsed = std::strtol(value.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || parsed < INT_MIN || parsed > INT_MAX) {
    throw UserError(name + "=\"" + value + "\" is not a whole number");
  }
  return static_cast<int>(parsed);
}

std::optional<int> IntVar(const std::map<std::string, std::string>& vars, const std::string& name) {
  auto value = Lookup(vars, name);
  if (!value) return std::nullopt;
  return ParseInt(name, *value);
}

void Validate(const DistributedEnv& env) {
  const std::string from = " (from " + env.source + " variables)";
  if (env.world_size < 1) throw UserError("world size " + std::to_string(env.world_size) + " must be >= 1" + from);
  if (env.rank < 0 || env.rank >= env.world_size) {
    throw UserError("rank " + std::to_string(env.rank) + " is outside 0.." + std::to_string(env.world_size - 1) +
                    " for world size " + std::to_string(env.world_size) + from);
  }
  if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
    throw UserError("local world size " + std::to_string(env.local_world_size) + " must be in 1.." +
                    std::to_string(env.world_size) + from);
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    throw UserError("local rank " + std::to_string(env.local_rank) + " is outside 0.." +
                    std::to_string(env.local_world_size - 1) + from);
  }
  if (env.node_rank < 0) throw UserError("node rank " + std::to_string(env.node_rank) + " must be >= 0" + from);
  if (env.master_port < 1 || env.master_port > 65535) {
    throw UserError("MASTER_PORT " + std::to_string(env.master_port) + " is outside 1..65535");
  }
  if (env.master_addr.empty()) throw UserError("MASTER_ADDR is empty" + from);
}

}  // namespace

std::string FirstHostOfSlurmNodelist(const std::string& nodelist) {
  // The first host ends at the first comma outside brackets; inside it, each
  // bracket group "[a-b,c]" stands for its first value "a".
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] == ']') throw UserError("SLURM_JOB_NODELIST=\"" + nodelist + "\" has an unbalanced ']'");
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) throw UserError("SLURM_JOB_NODELIST=\"" + nodelist + "\" has an unbalanced '['");
    const std::string ranges = nodelist.substr(i + 1, close - i - 1);
    const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
    if (first.empty()) throw UserError("SLURM_JOB_NODELIST=\"" + nodelist + "\" has an empty range");
    host += first;
    i = close + 1;
  }
  if (host.empty()) throw UserError("SLURM_JOB_NODELIST=\"" + nodelist + "\" names no host");
  return host;
}

int TasksOnSlurmNode(const std::string& tasks_per_node, int node_index) {
  // Comma-separated entries "count" or "count(xrepeat)".
  int node = 0;
  size_t i = 0;
  const std::string bad = "SLURM_TASKS_PER_NODE=\"" + tasks_per_node + "\"";
  while (i < tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', i);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string entry = tasks_per_node.substr(i, end - i);
    const size_t paren = entry.find("(x");
    int count = 0;
    int repeat = 1;
    if (paren == std::string::npos) {
      count = ParseInt(bad, entry);
    } else {
      if (entry.back() != ')') throw UserError(bad + " is malformed");
      count = ParseInt(bad, entry.substr(0, paren));
      repeat = ParseInt(bad, entry.substr(paren + 2, entry.size() - paren - 3));
    }
    if (count < 1 || repeat < 1) throw UserError(bad + " is malformed");
    if (node_index < node + repeat) return count;
    node += repeat;
    i = end + 1;
  }
  throw UserError(bad + " has no entry for node " + std::to_string(node_index));
}

DistributedEnv DistributedEnvFromVariables(const std::map<std::string, std::string>& vars) {
  DistributedEnv env;
  if (Lookup(vars, "RANK") || Lookup(vars, "WORLD_SIZE")) {
    env.source = "torchrun";
    env.rank = IntVar(vars, "RANK").value_or(0);
    env.world_size = IntVar(vars, "WORLD_SIZE").value_or(1);
    env.local_rank = IntVar(vars, "LOCAL_RANK").value_or(env.rank);
    env.local_world_size = IntVar(vars, "LOCAL_WORLD_SIZE").value_or(env.world_size);
    const int per_node = env.local_world_size > 0 ? env.local_world_size : 1;
    env.node_rank = IntVar(vars, "GROUP_RANK").value_or(env.rank / per_node);
  } else if (Lookup(vars, "SLURM_PROCID")) {
    env.source = "slurm";
    env.rank = *IntVar(vars, "SLURM_PROCID");
    env.world_size = IntVar(vars, "SLURM_NTASKS").value_or(1);
    env.local_rank = IntVar(vars, "SLURM_LOCALID").value_or(0);
    env.node_rank = IntVar(vars, "SLURM_NODEID").value_or(0);
    if (auto n = IntVar(vars, "SLURM_NTASKS_PER_NODE")) {
      env.local_world_size = *n;
    } else if (auto form = Lookup(vars, "SLURM_TASKS_PER_NODE")) {
      env.local_world_size = TasksOnSlurmNode(*form, env.node_rank);
    } else {
      env.local_world_size = env.world_size;
    }
    if (auto nodelist = Lookup(vars, "SLURM_JOB_NODELIST")) env.master_addr = FirstHostOfSlurmNodelist(*nodelist);
  }
  if (auto addr = Lookup(vars, "MASTER_ADDR")) env.master_addr = *addr;
  if (auto port = IntVar(vars, "MASTER_PORT")) env.master_port = *port;
  Validate(env);
  return env;
}

DistributedEnv ReadDistributedEnv() {
  std::map<std::string, std::string> vars;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos) vars.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return DistributedEnvFromVariables(vars);
}

}  // namespace llmplan::executor
