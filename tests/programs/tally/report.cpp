#include "report.hpp"

#include <sstream>

#include "fixed.hpp"

std::string report(const std::string &name, const counts &c) {
    std::ostringstream out;
    out << name << ": n=" << c.n << " sum=" << c.sum << " min=" << c.min << " max=" << c.max
        << " range=" << counts_range(&c) << " mean=" << fixed2(counts_mean_x100(&c)) << "\n";
    return out.str();
}
