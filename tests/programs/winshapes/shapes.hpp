// A freestanding C++ program for Windows-style (COFF) links: no exceptions, no RTTI, no
// C++ library, no CRT start-up (/nodefaultlib /entry:main): it links on any machine.
#pragma once

struct Shape {
    constexpr Shape() = default;
    virtual int area() const { return 0; }
    virtual int corners() const { return 0; }
};

template <typename T> inline T scaled(T value, T factor) { return value * factor; }

struct Square : Shape {
    constexpr explicit Square(int side) : side(side) {}
    int area() const override;
    int corners() const override { return 4; }
    int side;
};

struct Circle : Shape {
    constexpr explicit Circle(int radius) : radius(radius) {}
    int area() const override;
    int radius;
};

const Shape *const *registry();
int total_area(const Shape *const *shapes);
