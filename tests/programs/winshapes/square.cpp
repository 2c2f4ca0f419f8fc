#include "shapes.hpp"

int Square::area() const { return scaled(side, side); }
