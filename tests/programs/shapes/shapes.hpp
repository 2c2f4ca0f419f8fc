#pragma once
#include <memory>
#include <string>
#include <vector>

struct Shape {
    virtual ~Shape() = default;
    virtual double area() const = 0;
    virtual std::string name() const = 0;
};

template <typename T> T scaled(T value, T factor) { return value * factor; }

std::unique_ptr<Shape> make_square(double side);
std::unique_ptr<Shape> make_circle(double radius);
std::vector<std::unique_ptr<Shape>> registry();
double total_area(const std::vector<std::unique_ptr<Shape>> &shapes);
